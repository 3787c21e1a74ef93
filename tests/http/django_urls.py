"""URLconf for the Django middleware tests."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path


def home(request: HttpRequest) -> HttpResponse:
    d = getattr(request, "ratekeeper_decision", None)
    return JsonResponse({"delay": d.delay if d is not None else None})


def health(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


urlpatterns = [path("", home), path("healthz", health)]
