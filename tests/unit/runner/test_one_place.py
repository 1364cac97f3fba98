"""One place for each rule: checked over the source, so a second copy cannot creep back."""

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def sources(*folders, skip=()):
    for folder in folders:
        for dirpath, _dirs, files in os.walk(os.path.join(ROOT, folder)):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(dirpath, name)
                    rel = os.path.relpath(path, ROOT)
                    if not any(rel.startswith(s) for s in skip):
                        yield rel, open(path, encoding="utf-8").read()


def test_no_second_byte_formatter_or_mib_literal_in_runner_and_the_panes():
    # runner/engine is not this change's to edit (its llama_log.MiB and chat_template's
    # 4 * 1024 * 1024 are left to its owner); runner/units.py defines the constants.
    skip = (os.path.join("runner", "engine"), os.path.join("runner", "units.py"))
    offenders = [rel for rel, text in sources("runner", os.path.join("tui", "panes"), skip=skip)
                 if "1024 * 1024" in text or re.search(r"def _?fmt_bytes", text)]
    assert offenders == []


def test_which_ceiling_binds_is_decided_only_in_roofline():
    """The decode pane and the estimate ask ``binding_ceiling``; nobody compares the two
    ceilings themselves."""
    pattern = re.compile(r'"bandwidth"\s+if\s|binding\s*=\s*"(bandwidth|compute)"|binding, ceiling = "')
    offenders = [rel for rel, text in sources("runner", os.path.join("tui", "panes"))
                 if pattern.search(text) and not rel.endswith(os.path.join("physics", "roofline.py"))]
    assert offenders == []


def test_the_panes_format_counts_with_fmt_int():
    """Thousands separators come from runner.units.fmt_int (N/A for unknown), not from
    each pane's own f-string."""
    panes = [os.path.join("tui", "panes", f"{name}.py") for name in ("decode", "estimate", "kv", "memory", "prefill")]
    offenders = [rel for rel, text in sources(os.path.join("tui", "panes"))
                 if rel in panes and re.search(r":,d?}", text)]
    assert offenders == []
