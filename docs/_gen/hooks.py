"""MkDocs hooks: the site is built from the same Markdown that GitHub shows.

The pages under docs/ link to files outside docs/ (`../README.md`, `../examples/...`) and
README.md links from the repository root (`docs/algorithms.md`), because that is what works
when the files are read in the repository. MkDocs only knows docs/, so strict mode would call
every such link broken. These hooks keep the Markdown as it is and make the site whole:

- README.md becomes the page `guide.md` and bench/README.md the page `bench.md`
  (generated, not copied, so they cannot drift);
- every relative link is resolved against the file's place in the repository: a target under
  docs/ becomes that page, README.md and bench/README.md become the pages above, and any other
  file or directory of the repository (examples, CHANGELOG.md) becomes a generated page under
  `repo/` that shows it, so the site needs no network and no repository host;
- a target that exists nowhere is left untouched, so MkDocs still reports it and `strict`
  fails the build: this makes links whole, it never hides a broken one.
"""

from __future__ import annotations

import posixpath
import re
import subprocess
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files, InclusionLevel

ROOT = Path(__file__).resolve().parents[2]

#: Repository files shown as pages of their own, at these site paths.
PAGES = {"README.md": "guide.md", "bench/README.md": "bench.md"}

# `](target)` of inline links and images, `[label]: target` of reference definitions.
_INLINE = re.compile(r"(?P<lead>\]\()(?P<target><[^>]*>|[^)\s]+)")
_REFDEF = re.compile(r"^(?P<lead> {0,3}\[[^\]]+\]:[ \t]*)(?P<target>\S+)", re.M)
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_LANGS = {".py": "python", ".toml": "toml", ".yaml": "yaml", ".yml": "yaml", ".md": "markdown",
          ".json": "json", ".jsonl": "json", ".sh": "sh", ".txt": "text"}

# Site path of each page -> the repository path it comes from and the file it is read from,
# and the repository files that the pages link to (turned into pages at the end of on_files).
_origin: dict[str, tuple[str, Path]] = {}
_linked: dict[str, str] = {}


def _tracked() -> set[str]:
    """Files git knows (a link to an untracked file would break on a fresh clone)."""
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    return {p for p in out.stdout.decode().split("\0") if p}


def _repo_page(path: str) -> str:
    return f"repo/{path}.md" if not path.endswith("/") else f"repo/{path}index.md"


def _show(path: str, tracked: set[str]) -> str:
    """A page that shows one repository file, or every tracked file of a directory."""
    if path.endswith("/"):
        files = sorted(p for p in tracked if p.startswith(path))
        body = [f"# `{path}`", "", f"The files of `{path}` in the repository.", ""]
        for p in files:
            body += [f"## `{p}`", "", _block(p)]
        return "\n".join(body)
    return f"# `{path}`\n\n{_block(path)}"


def _block(path: str) -> str:
    text = (ROOT / path).read_text(encoding="utf-8")
    fence = "`" * max(3, 1 + max((len(m) for m in re.findall(r"`+", text)), default=0))
    lang = _LANGS.get(Path(path).suffix, "text")
    return f"{fence}{lang}\n{text.rstrip()}\n{fence}\n"


def on_config(config: Any) -> Any:
    _origin.clear()
    _linked.clear()
    return config


def on_files(files: Files, config: Any) -> Files:
    for f in files.documentation_pages():
        _origin[f.src_uri] = (f"docs/{f.src_uri}", Path(f.abs_src_path or ""))
    for repo_path, site_path in PAGES.items():
        text = (ROOT / repo_path).read_text(encoding="utf-8")
        files.append(File.generated(config, site_path, content=text))
        _origin[site_path] = (repo_path, ROOT / repo_path)
    # Every page's links are read now (not at render time) so the pages that show repository
    # files exist before MkDocs validates links.
    tracked = _tracked()
    for site_path, (repo_path, source) in list(_origin.items()):
        _rewrite(source.read_text(encoding="utf-8"), site_path, repo_path, tracked)
    for repo_path, page in sorted(_linked.items()):
        f = File.generated(config, page, content=_show(repo_path, tracked))
        f.inclusion = InclusionLevel.NOT_IN_NAV
        files.append(f)
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    origin = _origin.get(page.file.src_uri)
    if origin is None:  # a page this hook did not see (none today)
        return markdown
    return _rewrite(markdown, page.file.src_uri, origin[0], None)


def _rewrite(text: str, site_path: str, repo_path: str, tracked: set[str] | None) -> str:
    """Rewrite the links of `text` (outside code blocks) from repository to site paths."""
    out: list[str] = []
    fence: str | None = None
    for line in text.splitlines(keepends=True):
        m = _FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
        elif fence is not None:
            close = line.strip()
            if len(close) >= len(fence) and set(close) == {fence[0]}:
                fence = None
        elif fence is None:
            def sub(m: re.Match[str], lead: str) -> str:
                return m.group(lead) + _map(m.group("target"), site_path, repo_path, tracked)

            line = _INLINE.sub(lambda m: sub(m, "lead"), line)  # noqa: PLW2901
            line = _REFDEF.sub(lambda m: sub(m, "lead"), line)  # noqa: PLW2901
        out.append(line)
    return "".join(out)


def _map(target: str, site_path: str, repo_path: str, tracked: set[str] | None) -> str:
    bare = target.strip("<>")
    if not bare or re.match(r"^[a-z][a-z0-9+.-]*:", bare, re.I) or bare.startswith(("#", "/")):
        return target  # a URL, a mail address, an anchor of this page or an absolute path
    path, _, anchor = bare.partition("#")
    where = posixpath.normpath(posixpath.join(posixpath.dirname(repo_path), path))
    if where.startswith("docs/"):
        if repo_path.startswith("docs/"):
            return target  # docs/ to docs/: MkDocs resolves (and checks) it as written
        dest = where.removeprefix("docs/")
    elif where in PAGES:
        dest = PAGES[where]
    elif tracked is not None and where in tracked:
        dest = _linked.setdefault(where, _repo_page(where))
    elif tracked is not None and any(p.startswith(where + "/") for p in tracked):
        dest = _linked.setdefault(where + "/", _repo_page(where + "/"))
    elif where in _linked:
        dest = _linked[where]
    elif where + "/" in _linked:
        dest = _linked[where + "/"]
    else:
        return target  # broken: MkDocs reports it
    rel = posixpath.relpath(dest, posixpath.dirname(site_path) or ".")
    return rel + (f"#{anchor}" if anchor else "")
