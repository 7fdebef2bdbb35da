"""The dashboard: a Dash app over a study database, read-only (``nas dashboard``).

``create_app(storage_url)`` builds it; ``dashboard.data`` reads (SQL), ``dashboard.analysis``
derives (front, hypervolume, importance), ``dashboard.figures`` draws and ``dashboard.layout``
lays out the pages.
"""

from dashboard.app import create_app

__all__ = ["create_app"]
