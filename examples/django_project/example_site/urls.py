"""The example project's views and URLs.

``login`` and ``Comments`` are written as a django-ratelimit project writes them (only the
import changed): ``@ratelimit`` keyed by the posted username and the address, and
``@method_decorator(ratelimit(...))`` on a class-based view's handler. Under the
middleware their limits and the policy's are one decision.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path
from django.utils.decorators import method_decorator
from django.views import View

from ratekeeper.http.django import ratelimit


def index(request: HttpRequest) -> HttpResponse:
    d = getattr(request, "ratekeeper_decision", None)
    return JsonResponse({"hello": "world", "remaining": d.remaining if d else None})


def report(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"report": "expensive"})


def healthz(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"status": "ok"})


# django-ratelimit's login idiom: 5 a minute per username, 10 per address; over either,
# the view answers itself (block=False) instead of the 429.
@ratelimit(key="post:username", rate="5/m", method="POST", block=False)
@ratelimit(key="ip", rate="10/m", method="POST", block=False)
def login(request: HttpRequest) -> HttpResponse:
    if request.limited:
        return JsonResponse({"error": "too many attempts, try again in a minute"}, status=429)
    return JsonResponse({"login": "checked"})


class Comments(View):
    """django-ratelimit's class-based-view idiom: only posting is limited."""

    def get(self, request: HttpRequest) -> HttpResponse:
        return JsonResponse({"comments": []})

    @method_decorator(ratelimit(key="ip", rate="3/m"))
    def post(self, request: HttpRequest) -> HttpResponse:
        return JsonResponse({"comment": "saved"}, status=201)


urlpatterns = [
    path("", index),
    path("report/", report),
    path("healthz", healthz),
    path("login/", login),
    path("comments/", Comments.as_view()),
]
