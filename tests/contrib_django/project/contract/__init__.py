"""The tasks of Django's own backend tests (tests/tasks/tasks.py of Django
6.1.3), adapted to due: tests/contrib_django/test_django_contract.py runs
Django's tests against DueBackend with them."""
