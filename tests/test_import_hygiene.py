"""The engine layer imports no UI library (as Harlequin enforces for its adapters)."""

import subprocess
import sys

MODULES = ["runner", "runner.engine.engine", "runner.process.parent", "runner.physics.roofline", "runner.physics.report",
           "runner.system.hardware", "runner.commands.cli", "scripted_engine", "runner.records.transcript"]


def test_runner_imports_no_textual_or_rich():
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in MODULES)
        + "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich', 'textual_plotext'))\n"
        + "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_headless_commands_do_not_import_textual(smollm_path):
    code = (
        "import sys\nfrom tui.cli import main\n"
        f"rc = main(['estimate', {smollm_path!r}, '--bandwidth-gbs', '10', '--tflops', '1'])\n"
        "print('TEXTUAL' if 'textual' in sys.modules else 'CLEAN', rc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().endswith("CLEAN 0")
