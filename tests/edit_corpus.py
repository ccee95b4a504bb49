"""A corpus of edits as agents really send them, with the file each one meant.

Data only: `tests/server/test_edit_corpus.py` runs every case through the real
stdio server, and `benchmarks/bench_landing.py` counts the calls an agent
following the envelopes needs to land each one (`calls_to_land`).

A case is a file as the agent read it, the edits it sent (mistakes and all),
the edits it sends once it has seen the real text (`fixed`: copied exactly,
what it meant), and the whole file it meant. An agent that gets candidates
back copies the one it means (`pick_line`, else the first) into old_text and
makes new_text from it by the same fix; one that gets no candidates reads the
file and sends `fixed`. `options` are call arguments the case adds (such as
`on_stale`); `other_change` is a change another writer makes to the file after
the agent read it and before its call (old text, new text), for cases whose
edit carries the hash the agent read (`expected_hash`). `lands_at_once` names
the modes whose first call lands; in the others, the first call is refused with
a candidate that, copied back, lands on the second.
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["CASES", "Case", "applied"]


class Case(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    #: What went wrong, as the corpus groups cases.
    mistake: str
    path: str
    before: str
    #: The edits as sent: (old_text, new_text) pairs.
    edits: list[tuple[str, str]]
    #: The edits the agent meant, in the file's own text.
    fixed: list[tuple[str, str]]
    expected: str
    #: The line of the candidate the agent means, when several are listed.
    pick_line: int | None = None
    #: Call arguments the case adds to edit_file's (modes add `match`).
    options: dict[str, Any] = {}
    #: A change another writer makes after the agent read the file: (old, new).
    other_change: tuple[str, str] | None = None
    #: Whether the call carries the content_hash the agent read.
    expected_hash: bool = False
    #: The modes (benchmarks/bench_landing.py's MODES) in which the first call lands.
    lands_at_once: tuple[str, ...] = ()


def applied(text: str, edits: list[tuple[str, str]]) -> str:
    """`edits` applied in order to `text`, each old text once (a corpus check).

    >>> applied("a b", [("a", "c"), ("c b", "d")])
    'd'
    """
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new, 1)
    return text


_SERVICE = """class Service:
    def __init__(self, store):
        self.store = store

    def fetch(self, key):
        value = self.store.get(key)
        if value is None:
            raise KeyError(key)
        return value
"""

_GO = (
    "package cache\n\nfunc (c *Cache) Get(key string) (string, bool) {\n"
    "\tc.mu.Lock()\n\tdefer c.mu.Unlock()\n\tv, ok := c.items[key]\n\treturn v, ok\n}\n"
)

_CONFIG = "[server]\r\nhost = localhost\r\nport = 8080\r\nworkers = 4\r\n"

_MIXED = (
    "# Release checklist\r\n\r\n- bump the version\r\n- tag the release\r\n"
    "- publish the wheels\n- announce it\n"
)

_PROSE = (
    "# Welcome\n\nDon\u2019t edit the generated files by hand.\n"
    "Run \u201cmake docs\u201d to rebuild them.\n"
)

_PATHS = """def load(path):
    if not path:
        return None
    return read(path)


def save(path, data):
    if not path:
        return None
    write(path, data)
"""

_JS = (
    "export function total(items) {\n  let sum = 0;\n  for (const item of items) {\n"
    "    sum += item.price;\n  }\n  return sum;\n}\n"
)

_NOTES = "Timeout \u2013 30 seconds\nRetries \u2013 3\n"

_TRAILING = "x = 1  \ny = 2\nz = 3\n"

_BLANK = "def run():\n    start()\n    \n    finish()\n"

_YAML = (
    'services:\n  web:\n    image: app:1.4\n    ports:\n      - "8080:80"\n'
    "  db:\n    image: postgres:15\n"
)

_CHAIN = "def area(w, h):\n    return w * h\n\n\nprint(area(2, 3))\n"

CASES: list[Case] = [
    Case(
        name="indentation_dropped_a_level",
        lands_at_once=("ledgerfs_loose",),
        mistake="indentation drift",
        path="service.py",
        before=_SERVICE,
        # The method copied from memory at the top level, as if outside the class.
        edits=[
            (
                "def fetch(self, key):\n    value = self.store.get(key)\n"
                "    if value is None:\n        raise KeyError(key)\n",
                "def fetch(self, key):\n    value = self.store.get(key)\n"
                '    if value is None:\n        raise LookupError(f"no {key}")\n',
            )
        ],
        fixed=[
            (
                "        if value is None:\n            raise KeyError(key)\n",
                '        if value is None:\n            raise LookupError(f"no {key}")\n',
            )
        ],
        expected=_SERVICE.replace("raise KeyError(key)", 'raise LookupError(f"no {key}")'),
    ),
    Case(
        name="indentation_one_space_short",
        lands_at_once=("ledgerfs_loose",),
        mistake="indentation drift",
        path="service2.py",
        before=_SERVICE,
        edits=[
            (
                "       if value is None:\n           raise KeyError(key)",
                "       if value is None:\n           return None",
            )
        ],
        fixed=[
            (
                "        if value is None:\n            raise KeyError(key)",
                "        if value is None:\n            return None",
            )
        ],
        expected=_SERVICE.replace("raise KeyError(key)", "return None"),
    ),
    Case(
        name="spaces_for_tabs",
        lands_at_once=("ledgerfs_loose",),
        mistake="tabs vs spaces",
        path="cache.go",
        before=_GO,
        edits=[
            (
                "    c.mu.Lock()\n    defer c.mu.Unlock()\n",
                "    c.mu.RLock()\n    defer c.mu.RUnlock()\n",
            )
        ],
        fixed=[
            ("\tc.mu.Lock()\n\tdefer c.mu.Unlock()\n", "\tc.mu.RLock()\n\tdefer c.mu.RUnlock()\n")
        ],
        expected=_GO.replace("c.mu.Lock()", "c.mu.RLock()").replace("Unlock", "RUnlock"),
    ),
    Case(
        name="trailing_spaces_dropped",
        lands_at_once=("ledgerfs_loose",),
        mistake="trailing spaces",
        path="vars.py",
        before=_TRAILING,
        edits=[("x = 1\ny = 2\n", "x = 10\ny = 20\n")],
        fixed=[("x = 1  \ny = 2\n", "x = 10\ny = 20\n")],
        expected="x = 10\ny = 20\nz = 3\n",
    ),
    Case(
        name="lf_edit_of_a_crlf_file",
        lands_at_once=("ledgerfs_exact", "ledgerfs_loose"),
        mistake="CRLF",
        path="settings.ini",
        before=_CONFIG,
        edits=[("port = 8080\nworkers = 4\n", "port = 9090\nworkers = 8\n")],
        fixed=[("port = 8080\r\nworkers = 4\r\n", "port = 9090\r\nworkers = 8\r\n")],
        expected=_CONFIG.replace("8080", "9090").replace("= 4", "= 8"),
    ),
    Case(
        name="lf_edit_of_mixed_line_endings",
        lands_at_once=("ledgerfs_loose",),
        mistake="CRLF",
        path="RELEASE.md",
        before=_MIXED,
        edits=[("- bump the version\n- tag the release\n", "- bump the version\n- sign the tag\n")],
        fixed=[
            (
                "- bump the version\r\n- tag the release\r\n",
                "- bump the version\r\n- sign the tag\r\n",
            )
        ],
        expected=_MIXED.replace("tag the release", "sign the tag"),
    ),
    Case(
        name="straight_quotes_for_curly",
        lands_at_once=("ledgerfs_loose",),
        mistake="curly quotes",
        path="README.md",
        before=_PROSE,
        edits=[
            (
                "Don't edit the generated files by hand.\n",
                "Don't edit the generated files by hand; they are rebuilt.\n",
            )
        ],
        fixed=[
            (
                "Don\u2019t edit the generated files by hand.\n",
                "Don't edit the generated files by hand; they are rebuilt.\n",
            )
        ],
        expected=_PROSE.replace(
            "Don\u2019t edit the generated files by hand.",
            "Don't edit the generated files by hand; they are rebuilt.",
        ),
    ),
    Case(
        name="second_edit_changes_the_first",
        lands_at_once=("ledgerfs_exact", "ledgerfs_loose"),
        mistake="chained edits",
        path="area.py",
        before=_CHAIN,
        edits=[
            ("def area(w, h):", "def area(width, height):"),
            (
                "def area(width, height):\n    return w * h",
                "def area(width, height):\n    return width * height",
            ),
        ],
        fixed=[
            ("def area(w, h):", "def area(width, height):"),
            (
                "def area(width, height):\n    return w * h",
                "def area(width, height):\n    return width * height",
            ),
        ],
        expected=_CHAIN.replace(
            "area(w, h):\n    return w * h", "area(width, height):\n    return width * height"
        ),
    ),
    Case(
        name="same_block_in_two_functions",
        mistake="ambiguous loose match",
        path="paths.py",
        before=_PATHS,
        # Meant for save(); the block is in load() too, and the indentation is off.
        edits=[
            (
                "  if not path:\n      return None\n",
                '  if not path:\n      raise ValueError("no path")\n',
            )
        ],
        fixed=[
            (
                "def save(path, data):\n    if not path:\n        return None\n",
                'def save(path, data):\n    if not path:\n        raise ValueError("no path")\n',
            )
        ],
        expected=_PATHS.replace(
            "        return None\n    write", '        raise ValueError("no path")\n    write'
        ),
        pick_line=8,
    ),
    Case(
        name="four_space_indent_of_a_two_space_file",
        mistake="indentation drift",
        path="total.js",
        before=_JS,
        # Not one offset (4 -> 2, 8 -> 4): too unsure to edit loosely.
        edits=[
            (
                "    for (const item of items) {\n        sum += item.price;\n    }\n",
                "    for (const item of items) {\n        sum += item.price * item.count;\n    }\n",
            )
        ],
        fixed=[
            (
                "  for (const item of items) {\n    sum += item.price;\n  }\n",
                "  for (const item of items) {\n    sum += item.price * item.count;\n  }\n",
            )
        ],
        expected=_JS.replace("item.price;", "item.price * item.count;"),
    ),
    Case(
        name="hyphen_for_en_dash",
        mistake="unicode look-alikes",
        path="notes.txt",
        before=_NOTES,
        edits=[("Timeout - 30 seconds\n", "Timeout - 60 seconds\n")],
        fixed=[("Timeout \u2013 30 seconds\n", "Timeout \u2013 60 seconds\n")],
        expected=_NOTES.replace("30 seconds", "60 seconds"),
    ),
    Case(
        name="misremembered_line",
        mistake="other",
        path="service3.py",
        before=_SERVICE,
        edits=[
            (
                "        value = self.store.lookup(key)\n        if value is None:\n",
                "        value = self.store.lookup(key, default=None)\n        if value is None:\n",
            )
        ],
        fixed=[
            (
                "        value = self.store.get(key)\n        if value is None:\n",
                "        value = self.store.get(key, None)\n        if value is None:\n",
            )
        ],
        expected=_SERVICE.replace("self.store.get(key)", "self.store.get(key, None)"),
    ),
    Case(
        name="blank_line_keeps_its_spaces",
        lands_at_once=("ledgerfs_loose",),
        mistake="trailing spaces",
        path="run.py",
        before=_BLANK,
        # The editor left four spaces on the blank line; the agent sends it empty.
        edits=[("    start()\n\n    finish()\n", "    start()\n\n    finish(code=0)\n")],
        fixed=[("    start()\n    \n    finish()\n", "    start()\n\n    finish(code=0)\n")],
        expected="def run():\n    start()\n\n    finish(code=0)\n",
    ),
    Case(
        name="nested_yaml_without_its_parent_indent",
        lands_at_once=("ledgerfs_loose",),
        mistake="indentation drift",
        path="compose.yaml",
        before=_YAML,
        # The block copied as if it were at the top level.
        edits=[
            (
                "web:\n  image: app:1.4\n  ports:\n",
                "web:\n  image: app:1.5\n  restart: always\n  ports:\n",
            )
        ],
        fixed=[
            (
                "  web:\n    image: app:1.4\n    ports:\n",
                "  web:\n    image: app:1.5\n    restart: always\n    ports:\n",
            )
        ],
        expected=_YAML.replace("app:1.4\n", "app:1.5\n    restart: always\n"),
    ),
    Case(
        name="copied_exactly",
        lands_at_once=("ledgerfs_exact", "ledgerfs_loose"),
        mistake="none",
        path="service4.py",
        before=_SERVICE,
        edits=[("        return value\n", "        return value.strip()\n")],
        fixed=[("        return value\n", "        return value.strip()\n")],
        expected=_SERVICE.replace("return value\n", "return value.strip()\n"),
    ),
]
