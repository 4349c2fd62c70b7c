"""The docs hold: the site builds with `mkdocs build --strict`, every rules file they show passes `alertd check`,
the README stays short and its links resolve, the API reference is what the OpenAPI schema makes, and every
design section the code cites has its anchor on the architecture page.

A YAML block that is a rules file (a top-level key of the rules file's) is checked; one that is only a piece
of a file is marked by `<!-- fragment -->` on the line before its fence. Nothing is skipped: without mkdocs
(the `test` and `dev` extras) the build test fails.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml
from markdown.extensions.toc import slugify

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
README_MAX_LINES = 260
FRAGMENT = "<!-- fragment -->"
RULES_KEYS = frozenset(
    {
        "sources",
        "notifiers",
        "route",
        "routes",
        "rules",
        "inhibit_rules",
        "time_intervals",
        "buffer",
        "delivery",
        "evaluation_interval",
        "runs",
        "export",
    }
)
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[\w+-]*)\s*$")
ENV_REF = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)\}")
SECRET_PATH = re.compile(r"/run/secrets/(?P<name>[A-Za-z0-9_.-]+)")
LINK = re.compile(r"!?\[[^\]]*\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^#{1,6}\s+(?P<text>.+?)\s*(?:\{#(?P<id>[\w-]+)\})?\s*$")
CITATION = re.compile(r"design section (\d+)")


def pages() -> list[Path]:
    """The Markdown files the site and the repository's front page show (deploy/README.md is included in the
    site's deployment page)."""
    return [README, ROOT / "deploy" / "README.md", *sorted(DOCS.rglob("*.md"))]


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    lang: str
    text: str
    fragment: bool

    @property
    def place(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks(path: Path) -> Iterator[Block]:
    """The fenced code blocks of a Markdown file, with the line of their opening fence."""
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, indent = i, m["indent"]
        before = next((ln.strip() for ln in reversed(lines[:start]) if ln.strip()), "")
        end = next((j for j in range(start + 1, len(lines)) if lines[j].strip() == "```"), len(lines))
        body = "\n".join(ln[len(indent) :] if ln.startswith(indent) else ln for ln in lines[start + 1 : end])
        yield Block(path, start + 1, m["lang"], body + "\n", before == FRAGMENT)
        i = end + 1


def yaml_blocks() -> list[Block]:
    return [b for p in pages() for b in blocks(p) if b.lang in ("yaml", "yml")]


def is_rule_test_file(block: Block) -> bool:
    data = yaml.safe_load(block.text)
    return isinstance(data, dict) and "tests" in data and "rule_files" in data


def is_rules_file(block: Block) -> bool:
    data = yaml.safe_load(block.text)
    return isinstance(data, dict) and bool(RULES_KEYS & set(data)) and not is_rule_test_file(block)


def test_every_yaml_block_is_yaml() -> None:
    bad = []
    for b in yaml_blocks():
        if b.fragment:
            continue
        try:
            yaml.safe_load(b.text)
        except yaml.YAMLError as e:
            bad.append(f"{b.place}: {e}")
    assert not bad, "\n".join(bad)


def test_every_rules_file_shown_passes_alertd_check(tmp_path: Path) -> None:
    """Each rules file in the docs goes through `alertd check` as written. The environment variables they
    read are set to stand-ins, and `/run/secrets/NAME` (the secret files of the examples) is a temporary
    directory holding a stand-in of each."""
    shown = [b for b in yaml_blocks() if not b.fragment and is_rules_file(b)]
    assert len(shown) >= 30, f"only {len(shown)} rules files found in the docs"
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALERTD_")}
    files = []
    for b in shown:
        for name in ENV_REF.findall(b.text):
            url = "URL" in name or "HOOK" in name
            env.setdefault(name, "https://hooks.example.com/T0/B0/x" if url else "stand-in-secret-42")
        for name in SECRET_PATH.findall(b.text):
            value = "https://ntfy.example.com/alerts-x7" if "url" in name else "stand-in-secret-42"
            (secrets / name).write_text(value + "\n")
        text = SECRET_PATH.sub(lambda m: str(secrets / m["name"]), b.text)
        slug = re.sub(r"[^A-Za-z0-9]+", "-", str(b.path.relative_to(ROOT)))
        f = tmp_path / f"{slug}-L{b.line}.yaml"
        f.write_text(text)
        files.append(f)
    r = subprocess.run(
        [sys.executable, "-m", "alertd", "check", *map(str, files)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count(": ok (") == len(files), r.stdout


def test_every_rule_test_file_shown_passes_alertd_test(tmp_path: Path) -> None:
    """The rule unit test files the docs show run with `alertd test` beside a copy of the default rules, as
    `rules/tests/` sits beside `rules/default.yaml`."""
    shown = [b for b in yaml_blocks() if not b.fragment and is_rule_test_file(b)]
    assert shown, "the docs show no rule test file"
    tests = tmp_path / "rules" / "tests"
    tests.mkdir(parents=True)
    (tmp_path / "rules" / "default.yaml").write_text((ROOT / "rules" / "default.yaml").read_text())
    files = []
    for b in shown:
        f = tests / f"{re.sub(r'[^A-Za-z0-9]+', '-', str(b.path.relative_to(ROOT)))}-L{b.line}.yaml"
        f.write_text(b.text)
        files.append(str(f))
    r = subprocess.run(
        [sys.executable, "-m", "alertd", "test", *files], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    """`mkdocs build --strict`: every page in the nav, every link and anchor found, every snippet there."""
    r = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "site" / "architecture.html").is_file()
    assert (tmp_path / "site" / "api" / "reference.html").is_file()


def test_the_readme_is_short() -> None:
    lines = len(README.read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; the details belong in docs/"


def anchors(path: Path) -> set[str]:
    """The anchors of a Markdown page as the site makes them: each heading's slug, or its `{#id}`."""
    out, fenced = set(), False
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        m = None if fenced else HEADING.match(line)
        if m:
            out.add(m["id"] or slugify(re.sub(r"[`*]", "", m["text"]), "-"))
    return out


def test_every_relative_link_of_the_readme_resolves() -> None:
    bad = []
    for m in LINK.finditer(README.read_text()):
        target = m["target"]
        if re.match(r"^[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (README.parent / path) if path else README
        if not file.exists():
            bad.append(f"{target}: no file {file.relative_to(ROOT)}")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            bad.append(f"{target}: no heading with anchor #{anchor} in {file.relative_to(ROOT)}")
    assert not bad, "\n".join(bad)


def test_the_api_reference_is_what_the_schema_makes() -> None:
    r = subprocess.run(
        [sys.executable, str(DOCS / "gen_api.py"), "--check"], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_design_section_the_code_cites_has_its_anchor() -> None:
    """`design section N` in a docstring resolves to docs/architecture.md#design-section-N."""
    cited = {m for p in (ROOT / "src").rglob("*.py") for m in CITATION.findall(p.read_text())}
    assert cited, "the code cites no design section: the test looks for the wrong words"
    have = anchors(DOCS / "architecture.md")
    missing = sorted((n for n in cited if f"design-section-{n}" not in have), key=int)
    assert not missing, f"docs/architecture.md has no heading for design section(s) {', '.join(missing)}"
