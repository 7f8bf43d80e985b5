"""The viewer's templates (package data in ``templates/``): one Jinja2 environment with
autoescape on for every template, so every value put in a page is HTML-escaped unless it
is markup this package made (:func:`jsonl_sessions.viewer.markup.markdown`).

The environment is built once; :func:`render` renders a template to a string,
:func:`generate` to a stream of pieces (each ``for`` loop of the template pulls its items
as it goes, so a template can render an iterator of any length).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import jinja2

from .markup import markdown


def url(path: str, **params: str | int | None) -> str:
    """``path`` with the query string of the ``params`` that are not None (every value
    percent-encoded, so any session key or id is safe in a link)."""
    query = urlencode([(name, str(value)) for name, value in params.items() if value is not None])
    return f"{path}?{query}" if query else path


@functools.lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("jsonl_sessions.viewer", "templates"),
        autoescape=True,  # every template, whatever its name ends with
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["markdown"] = markdown
    env.globals["url"] = url
    return env


def render(template: str, **context: Any) -> str:
    """The template ``template`` rendered with ``context`` (HTML, every value escaped)."""
    return environment().get_template(template).render(**context)


def generate(template: str, **context: Any) -> Iterator[str]:
    """The pieces of :func:`render`'s text, rendered as they are asked for."""
    return environment().get_template(template).generate(**context)


__all__ = ["environment", "generate", "render", "url"]
