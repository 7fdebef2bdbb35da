"""The dashboard: a Dash app over a study database, read-only (``nas dashboard``).

``create_app(storage_url)`` builds it, or ``create_app(reader=...)`` over any
``dashboard.reader.StudyReader``; ``dashboard.pages`` registers each page's callbacks on it.
``dashboard.data`` reads the database (SQL, read-only; ``dashboard.reader.SqlReader``),
``dashboard.analysis`` derives the front, hypervolume and importance, ``dashboard.figures``
draws, ``dashboard.layout`` lays out the pages, ``dashboard.formatting`` writes numbers and
headers one way for all of them, ``dashboard.exports`` renders config downloads
through ``studies.export``, and ``dashboard.testing`` drives the callbacks over HTTP.
"""

from dashboard.app import create_app

__all__ = ["create_app"]
