"""The example project's views and URLs."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path


def index(request: HttpRequest) -> HttpResponse:
    d = getattr(request, "ratekeeper_decision", None)
    return JsonResponse({"hello": "world", "remaining": d.remaining if d else None})


def report(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"report": "expensive"})


def healthz(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"status": "ok"})


urlpatterns = [
    path("", index),
    path("report/", report),
    path("healthz", healthz),
]
