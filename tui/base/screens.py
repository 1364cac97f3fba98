"""Modal screens: help, an error report (instead of a crash), the pre-flight warning."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Static

KEYS = [
    ("Enter", "send the message (typing works while the model loads; the message waits for it)"),
    ("/file PATH", "typed as the message: sends that file's text (Ctrl+O starts it)"),
    ("paste", "several lines become one chip, e.g. [pasted text #1: 5 paragraphs, 327 words]: Enter sends "
              "all of it, newlines kept; Backspace after it (Delete before it) removes the whole chip"),
    ("Esc", "cancel the running turn (prefill or decode); in a dialog, close it"),
    ("Ctrl+S", "save an SVG screenshot (kvtop names it; the path is shown)"),
    ("Ctrl+E", "export a debug bundle: JSON (settings, hardware, GGUF facts, per-turn timings, trace, "
               "screenshot) and a CSV of the turns; a dialog asks: redacted to post, or with the conversation"),
    ("Ctrl+L", "new chat (clears the KV cache; a running reply is cancelled first); the old chat is put "
               "aside, not lost"),
    ("Ctrl+Z  /undo", "bring back the chat Ctrl+L put aside (again: back to the other one); a question a "
                      "reply was cut at goes back into the prompt"),
    ("Ctrl+R", "restart the engine (same settings; the chat stays and is prefilled again)"),
    ("Ctrl+T", "pick a theme (remembered)"),
    ("Ctrl+P", "command palette: every action by name (waterfall, attach, theme…)"),
    ("F1", "this help (Esc, F1 or q closes it)"),
    ("F2", "TTFT waterfall of each turn (←/→; the running one in progress): where the time to first token "
           "went; Esc, F2 or q closes it"),
    ("F3", "Markdown on/off for model replies (links shown as text (url), never opened)"),
    ("Ctrl+O", "attach a file: starts '/file ' in the input; type the path, Enter sends its text"),
    ("F4", "kvtop --server with several servers: chat with the next one"),
    ("F6", "next page of panes when they do not all fit (or click a page's name above them)"),
    ("F7", "measure the KV cache's quality on this chat: KLD of q8_0/q4_0 against f16 (or of the running "
           "quantized cache), in contexts beside the chat's; the KV pane shows it; Esc stops"),
    ("F8", "find faster settings: kvtop tune's A/Bs in the engine between turns, up to 60 s (Esc stops; the "
           "chat stays); a winner is offered as a restart with its flags"),
    ("Tab", "move the cursor between the prompt, the chat and the panes (Shift+Tab back; or click a pane; "
            "a click on a reply opens its waterfall)"),
    ("↑ ↓ PgUp PgDn Home End", "scroll the chat or the panes when the cursor is there; the mouse wheel "
                               "scrolls what it is over"),
    ("q  ?", "quit, this help: only with the cursor outside the prompt and the prompt empty (after Tab "
             "or a click); in the prompt they are text, and any key typed outside goes to the prompt"),
    ("Ctrl+Q Ctrl+C", "quit (the engine process is stopped)"),
]

# kvtop load's live view (tui/server/load_view.py): no chat and no prompt, so only the keys that
# act there; Enter, Ctrl+L, Ctrl+Z, Ctrl+R, Ctrl+O, F2 and F3 belong to the chat
LOAD_KEYS = [
    ("Esc", "stop the load: every stream in flight is closed and kvtop waits until no slot of the "
            "server is busy (the dashboard stays); in a dialog, close it"),
    ("q", "while the load runs: stop it (as Esc); once it has stopped or ended: quit and print the table"),
    ("Ctrl+C Ctrl+Q", "stop the load and quit once the server is idle; again while it stops: quit at once"),
    ("F1  ?", "this help (Esc, F1 or q closes it)"),
    ("Ctrl+S", "save an SVG screenshot (kvtop names it; the path is shown)"),
    ("Ctrl+T", "pick a theme (remembered)"),
    ("Ctrl+P", "command palette"),
    ("F4", "several servers: show the next one's slots and physics (the load goes on to all of them)"),
    ("F6", "next page of panes when they do not all fit (or click a page's name above them)"),
    ("Tab", "move the cursor between the panes (Shift+Tab back; or click a pane)"),
    ("↑ ↓ PgUp PgDn Home End", "scroll the pane the cursor is in; the mouse wheel scrolls what it is over"),
]

PANES = [
    ("Prefill", "prompt tokens done/total; reused-from-cache tokens are pre-filled in their own colour"),
    ("Decode", "live tok/s vs the bandwidth ceiling (bandwidth / bytes read per token) and the compute ceiling; "
               "the chart: tok/s per KV position, scaled to the measured line (a far ceiling is named under "
               "it), a │ where the stream stalled"),
    ("KV cache", "cells used of n_ctx, bytes used/allocated per attention kind"),
    ("Memory", "engine and UI RSS, RAM, CPU of engine/UI/others, GPUs, llama.cpp's buffers"),
    ("Estimate", "roofline, forecast (calibrated here) and measured, and why they differ"),
]

LOAD_ROOF = ("the roof: min(B x bandwidth / (weights + B x KV at depth), TFLOPS / FLOP per token), B the users "
             "decoding together (at most the slots), depth -p + -n/2; drawn when within 3x of the measured top, "
             "else named above the scale; a level marked ! has a per-user rate the roof and the load do not "
             "explain (why under it)")


def load_panes(roof: str | None) -> list[tuple[str, str]]:
    """kvtop load's panes, the roof's formula with this run's inputs in figures."""
    return [(LOAD_PANES[0][0], LOAD_PANES[0][1] + "; " + LOAD_ROOF + (f". Here: {roof}" if roof else ""))] \
        + LOAD_PANES[1:]


LOAD_PANES = [
    ("Load", "tok/s by users: all users together and each one's rate under the batched roof, TTFT p95 "
             "per level, the knee; the line above it says which level runs, with its requests done, "
             "elapsed time and ETA"),
    ("Server", "every slot of the server, its counters as rates, the batched ceiling against the "
               "measured generation rate"),
    ("KV cache", "cells used of n_ctx, a line for the cells of every slot"),
    ("Decode", "no chat turn runs: the decode ceilings for this model and machine (no chart)"),
    ("Memory", "RAM, CPU of kvtop and others; the server process's RSS when it runs on this machine"),
    ("Estimate", "roofline for this model and machine"),
]


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,f1,q,question_mark", "dismiss", "Close")]

    def __init__(self, refresh_s: float = 1.0, refresh_why: str = "", load: bool = False,
                 roof: str | None = None, spec: str | None = None) -> None:
        """``roof``: kvtop load's roof with its inputs in figures (or why there is none);
        ``spec``: what speculation's figures mean and the latest (tui/turn/spec_view.py)."""
        super().__init__()
        self.refresh_s = refresh_s
        self.refresh_why = refresh_why
        self.keys, self.panes = (LOAD_KEYS, load_panes(roof)) if load else (KEYS, PANES)
        if spec:
            self.panes = [*self.panes, ("Speculation", spec)]

    def compose(self) -> ComposeResult:
        """Two columns, so a long description wraps under itself, not under the keys."""
        with VerticalScroll(id="help-box", classes="dialog"):
            yield Static(Content.styled("kvtop keys", "bold"), markup=False)
            for key, what in self.keys:
                with Horizontal(classes="help-row"):
                    yield Static(Content.styled(key, "bold $accent"), markup=False, classes="help-key")
                    yield Static(Content(what), markup=False, classes="help-what")
            yield Static(Content.styled("panes", "bold"), markup=False, classes="help-heading")
            for pane, what in self.panes:
                with Horizontal(classes="help-row"):
                    yield Static(Content.styled(pane, "bold $primary"), markup=False, classes="help-key")
                    yield Static(Content(what), markup=False, classes="help-what")
            yield Static(Content.assemble(
                ("refresh ", "bold $primary"),
                f"every {self.refresh_s:g} s while a turn runs ({self.refresh_why}); "
                "each redraw takes CPU from llama.cpp's threads. --refresh SECONDS changes it."),
                markup=False, classes="help-heading")
            yield Button("Close", id="close", variant="primary")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss()


class ErrorScreen(ModalScreen[str | None]):
    """A failure the user must see: model not loadable, engine died or not responding.
    With ``offer_restart`` it has a "Restart engine" button (dismisses with "restart")."""

    BINDINGS = [Binding("escape,enter", "dismiss", "Close")]

    def __init__(self, title: str, reason: str, offer_restart: bool = False) -> None:
        super().__init__()
        self.title_text = title
        self.reason = reason
        self.offer_restart = offer_restart

    def compose(self) -> ComposeResult:
        with Vertical(id="error-box", classes="dialog"):
            yield Static(Content.styled(self.title_text, "bold $error"), markup=False)
            yield Static(Content(self.reason), markup=False, id="error-reason")
            with Horizontal(classes="buttons"):
                if self.offer_restart:
                    yield Button("Restart engine", id="restart", variant="warning")
                yield Button("Close", id="close", variant="primary")
                yield Button("Quit", id="quit", variant="error")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "quit":
            self.app.exit(return_code=1)
        elif event.button.id == "restart":
            self.dismiss("restart")
        else:
            self.dismiss(None)


class PreflightScreen(ModalScreen[bool]):
    """The model may not fit in memory: go on, or stop before loading."""

    def __init__(self, message: str) -> None:
        super().__init__()
        self.message = message

    def compose(self) -> ComposeResult:
        with Vertical(id="preflight-box", classes="dialog"):
            yield Static(Content.styled("This model may not fit in memory", "bold $warning"), markup=False)
            yield Static(Content(self.message), markup=False)
            with Horizontal(classes="buttons"):
                yield Button("Load anyway", id="go", variant="warning")
                yield Button("Stop", id="stop", variant="primary")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "go")
