"""Views that enqueue, as a user's would."""

import json

from django.db import transaction
from django.http import HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from shop.models import Signup
from shop.tasks import send_welcome_email


@csrf_exempt
def signup(request, database):
    """Write a signup and enqueue its e-mail in one transaction; `fail=1` raises after both."""
    email = request.POST["email"]
    try:
        with transaction.atomic(using=database):
            Signup.objects.using(database).create(email=email)
            result = send_welcome_email.using(backend=_backend(database)).enqueue(email)
            if request.POST.get("fail"):
                raise RuntimeError("the view failed after enqueueing")
    except RuntimeError:
        return HttpResponse("rolled back", status=500)
    return JsonResponse({"id": result.id, "status": result.status})


@csrf_exempt
async def signup_async(request, database):
    """An async view: aenqueue (no transaction)."""
    email = request.POST["email"]
    result = await send_welcome_email.using(backend=_backend(database)).aenqueue(email)
    return JsonResponse({"id": result.id, "status": result.status})


def result(request, database, result_id):
    found = send_welcome_email.using(backend=_backend(database)).get_result(result_id)
    return HttpResponse(json.dumps({"status": found.status, "value": found.return_value}))


def _backend(database):
    return "pg" if database == "pg" else "default"
