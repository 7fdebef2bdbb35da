"""Driving the app's callbacks over HTTP, as the browser does (for tests and benchmarks).

``first_render(client, app, pathname)`` sends what Dash's front end sends when it opens
``pathname``: the page route, then every callback whose inputs the new page holds (unless it
prevents its initial call), with the inputs' initial values taken from the route's answer,
then the callbacks that those answers trigger (one step of chaining: the study page's views,
which wait for the front).
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import dash
import numpy as np

__all__ = ["CallbackResult", "array_values", "callback_body", "components", "first_render",
           "open_every_view", "post_callback", "view_figure"]


def array_values(array: Any) -> list[float]:
    """A serialised plotly array's values (a list, or a base64 typed array ``{dtype, bdata}``)."""
    if isinstance(array, dict):
        return [float(x) for x in np.frombuffer(base64.b64decode(array["bdata"]),
                                                dtype=np.dtype(array["dtype"]))]
    return [float(x) for x in array]


def _dicts(spec: Any) -> list[dict[str, Any]]:
    specs = spec if isinstance(spec, (list, tuple)) else [spec]
    return [{"id": o.component_id, "property": o.component_property.split("@")[0]}
            for o in specs]


def callback_body(app: dash.Dash, output: str, values: Mapping[str, Any],
                  changed: str | None = None) -> dict[str, Any]:
    """The JSON body of ``POST /_dash-update-component`` for the callback whose output key is
    (or starts with) ``output``; ``values`` maps ``"id.property"`` to the value sent."""
    key = next(k for k in app.callback_map if k == output or k.startswith(output))
    spec = app.callback_map[key]
    outputs = _dicts(spec["output"])

    def fill(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**i, "value": values.get(f"{i['id']}.{i['property']}")} for i in items]

    inputs = fill(spec["inputs"])
    return {"output": key, "outputs": outputs if len(outputs) > 1 or key.startswith("..")
            else outputs[0], "inputs": inputs, "state": fill(spec["state"]),
            "changedPropIds": [changed or f"{inputs[0]['id']}.{inputs[0]['property']}"]}


def components(tree: Any) -> Iterator[dict[str, Any]]:
    """Every component (``{"type", "namespace", "props"}``) in a layout's JSON."""
    if isinstance(tree, dict):
        if "props" in tree and "type" in tree:
            yield tree
            tree = tree["props"]
        for value in tree.values():
            if isinstance(value, (dict, list)):
                yield from components(value)
    elif isinstance(tree, list):
        for item in tree:
            yield from components(item)


@dataclass(frozen=True)
class CallbackResult:
    output: str
    status: int
    seconds: float
    size: int
    response: Any


def post_callback(client: Any, body: Mapping[str, Any]) -> CallbackResult:
    started = time.perf_counter()
    answer = client.post("/_dash-update-component", json=body)
    seconds = time.perf_counter() - started
    data = answer.get_json(silent=True) if answer.status_code == 200 else None
    return CallbackResult(str(body["output"]), answer.status_code, seconds, len(answer.data),
                          data)


def first_render(client: Any, app: dash.Dash, pathname: str) -> list[CallbackResult]:
    """Open ``pathname`` as the browser would; each request's result, the route's first."""
    route = post_callback(client, callback_body(app, "page.children",
                                                {"url.pathname": pathname}))
    results = [route]
    if route.status != 200:
        return results
    page = route.response["response"]["page"]["children"]
    props = {}
    for c in components(page):
        id_ = c["props"].get("id")
        if isinstance(id_, str):
            props[id_] = c["props"]
    initial = {spec["output"]: spec.get("prevent_initial_call", False)
               for spec in app._callback_list}

    def on_page(spec: dict[str, Any]) -> bool:  # every input is a component of the page
        return all(isinstance(i["id"], str) and i["id"] in props for i in spec["inputs"])

    def values(spec: dict[str, Any]) -> dict[str, Any]:  # its inputs' and states' values
        return {f"{i['id']}.{i['property']}": props[i["id"]].get(i["property"])
                for i in [*spec["inputs"], *spec["state"]] if i["id"] in props}

    for key, spec in app.callback_map.items():
        if key != "page.children" and not initial.get(key) and on_page(spec):
            results.append(post_callback(client, callback_body(app, key, values(spec))))
    # One step of chaining: the callbacks those answers trigger.
    changed = {f"{id_}.{prop}": value for r in results[1:] if r.response
               for id_, out in r.response.get("response", {}).items() if isinstance(id_, str)
               for prop, value in out.items()}
    for key, spec in app.callback_map.items():
        inputs = [f"{i['id']}.{i['property']}" for i in spec["inputs"]]
        trigger = next((i for i in inputs if i in changed), None)
        if initial.get(key) and trigger is not None and on_page(spec):
            results.append(post_callback(client, callback_body(
                app, key, {**values(spec), **changed}, changed=trigger)))
    return results


def open_every_view(client: Any, app: dash.Dash, study: str,
                    knob: str) -> list[tuple[str, CallbackResult]]:
    """Open each of the study page's views (tabs) as a click on its tab does, with ``knob`` the
    effect view's knob and accuracy its objective: (tab, answer) in the tabs' order."""
    from dashboard import layout

    tabs = (layout.HYPERVOLUME, layout.PARETO_3D, layout.PARCOORDS, layout.IMPORTANCE,
            layout.EFFECT, layout.TIMELINE, layout.CURVES, layout.PROMOTION)
    return [(tab, post_callback(client, callback_body(app, "..view.children", {
        "study.data": {"name": study}, "views.value": tab, "front-drawn.data": "x",
        "effect-knob.value": knob, "effect-objective.value": "accuracy"},
        changed="views.value"))) for tab in tabs]


def view_figure(client: Any, app: dash.Dash, study: str, tab: str) -> dict[str, Any]:
    """The figure of the study page's view ``tab``, as a click on that tab gets it (the effect
    view without a knob): the Graph's ``figure`` of the answer; an error answer fails."""
    answer = post_callback(client, callback_body(app, "..view.children", {
        "views.value": tab, "front-drawn.data": "drawn", "effect-knob.value": None,
        "effect-objective.value": None, "study.data": {"name": study},
        "effect-controls.style": {}}, changed="views.value"))
    if answer.status != 200:
        raise AssertionError(f"view {tab!r} of {study!r} answered {answer}")
    box = answer.response["response"]["view"]["children"]
    graph = next(c for c in components(box) if c["type"] == "Graph")
    figure: dict[str, Any] = graph["props"]["figure"]
    return figure
