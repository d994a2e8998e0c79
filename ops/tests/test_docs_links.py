"""Every relative link in the repository's Markdown files reaches a file that exists, and every
`#anchor` a heading of the page it names (GitHub's heading ids). External links are not fetched:
the check runs offline, in CI, and a remote page's state is not the repository's."""

from __future__ import annotations

import re
import subprocess

from opslib import ROOT

# [text](target) or ![alt](target), with an optional "title"; text may hold one level of [].
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
CODE_SPAN = re.compile(r"`[^`\n]*`")


def markdown_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True, text=True, check=True)
    return out.stdout.split()


def prose(text: str) -> str:
    """The text without fenced blocks and code spans, where brackets are not links."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def heading_ids(text: str) -> set[str]:
    """GitHub's ids for a page's headings: lowercased, punctuation but `-` and `_` dropped,
    spaces to `-`, a repeated heading suffixed -1, -2, ...; plus explicit `<a id|name>`s."""
    ids, seen = set(), {}
    for line in FENCE.sub("", text).splitlines():
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            ids.add(slug if n == 0 else f"{slug}-{n}")
        ids.update(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", line))
    return ids


def test_heading_ids_follow_github():
    ids = heading_ids("# A `b` (c, d)\n## A `b` (c, d)\n```\n# not a heading\n```\n")
    assert ids == {"a-b-c-d", "a-b-c-d-1"}


def test_relative_links_reach_files_and_headings():
    files = markdown_files()
    assert len(files) > 10, files
    checked, broken = 0, []
    for name in files:
        page = ROOT / name
        for m in LINK.finditer(prose(page.read_text())):
            target = m.group(1)
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
                continue
            checked += 1
            path, _, anchor = target.partition("#")
            dest = (page.parent / path) if path else page
            if not dest.exists():
                broken.append(f"{name}: {target}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in heading_ids(dest.read_text()):
                broken.append(f"{name}: {target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert checked > 50, f"only {checked} links found: the pattern is off"
    assert not broken, "\n".join(broken)
