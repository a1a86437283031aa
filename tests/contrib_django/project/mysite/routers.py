"""Every app's tables in every database: the tests write to either.

With DUE_TEST_PG_DUE_ONLY set, the PostgreSQL database holds due's tables and
no model's, as a database kept for the jobs does."""

import os


class ShopEverywhere:
    def allow_migrate(self, db, app_label, **hints):
        if db == "pg" and os.environ.get("DUE_TEST_PG_DUE_ONLY"):
            return app_label == "due"
        return True
