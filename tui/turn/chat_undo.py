"""Ctrl+L keeps what it clears: a new chat puts the old one aside, and Ctrl+Z (or
``/undo``) brings it back.

Why: many users press Ctrl+L out of habit, to redraw the terminal, and lost the whole
conversation. Now the notice after a new chat says how to get it back. What is put
aside is the session's messages (``ChatSession.undo_new_chat``: the next turn sends
them again, and the engine keeps the prefix its KV cache shares with them and prefills
the rest), the chat pane's lines as they were shown (each reply with its footer and
its waterfall on click) and the Estimate pane's rows and forecast (the last turn's
measured column and verdict: Ctrl+L clears them, so Ctrl+Z brings them back). An undo
swaps: the chat it replaces is put aside in turn, so a second Ctrl+Z goes back. A reply that Ctrl+L cut is not part of the chat put aside: its
question goes back into the prompt, where Enter asks it again (at once when the cut
turn was the chat's first: there is nothing else to bring back).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvtop.tui.app import KvtopApp

UNDO_NOTICE = "New chat. Ctrl+Z (or /undo) brings the last one back."
CUT_FIRST_NOTICE = "New chat. The question Ctrl+L cut is back in the prompt: Enter asks it again."


class ChatUndo:
    """The new chat that can be undone: what it put aside, and how it comes back. The
    App holds one (``app.chats``); Ctrl+L, Ctrl+Z, ``/undo`` and a replay's recorded
    new chat and undo call it."""

    def __init__(self, app: KvtopApp) -> None:
        self.app = app
        self.chat_aside: list[tuple] = []  # the put-aside chat's lines: (role, text, footer, turn index)
        self.cut_question: str | None = None  # the question of the reply the last new chat cut
        self.estimate_aside: tuple | None = None  # the put-aside chat's Estimate pane (EstimatePane.shown)

    def chat_lines(self, cut: bool) -> list[tuple]:
        """The chat pane's lines; ``cut``: without the running turn's question and reply."""
        from kvtop.tui.panes.chat import ChatMessage

        lines = [(m.role, m.text, m.footer, m.turn_index) for m in self.app.dash.chat.query(ChatMessage)]
        if cut:
            last_user = max((i for i, line in enumerate(lines) if line[0] == "user"), default=len(lines))
            lines = lines[:last_user]
        return lines

    def new_chat(self, notice: bool = True) -> None:
        """Ctrl+L (and a replay's recorded new chat): the chat is put aside, the screen cleared."""
        app = self.app
        s = app.session
        running = s.active is not None
        question = s.active.user if running else None
        lines = self.chat_lines(cut=running)
        estimate = app.dash.estimate.shown()
        before = s.cleared
        s.new_chat()
        put_aside = s.cleared is not before
        if put_aside:
            self.chat_aside, self.cut_question, self.estimate_aside = lines, question, estimate
        app.turn.clear()
        prompt = app.dash.prompt
        if (not put_aside and question and notice and not prompt.value
                and app.session.engine.capabilities.takes_input):
            # the chat's first turn cut: nothing to bring back, so its question is back at once
            prompt.value = question
            prompt.cursor_position = len(question)
            app.notify(CUT_FIRST_NOTICE, markup=False, timeout=8)
        elif put_aside and notice:
            app.notify(UNDO_NOTICE, markup=False, timeout=8)
        app.forecast_border.request()  # a draft's cached prefix is gone

    def bring_back(self) -> None:
        """Ctrl+Z or ``/undo``: the chat the last new chat put aside is back."""
        app = self.app
        lines_now = self.chat_lines(cut=False)
        pane = app.dash.estimate
        estimate_now = pane.shown()
        refusal = app.session.undo_new_chat()
        if refusal is not None:
            app.notify(refusal, severity="warning", markup=False, timeout=4)
            return
        lines, self.chat_aside = self.chat_aside, lines_now
        question, self.cut_question = self.cut_question, None
        self.show_chat_lines(lines)
        estimate, self.estimate_aside = self.estimate_aside, estimate_now
        if estimate is not None:
            pane.show(estimate)
        else:
            app.estimates.update()
        app.forecast_border.request()  # the draft's cached prefix is another chat's now
        n = sum(1 for m in app.session.messages if m.role == "user")
        said = f"Chat of {n} turn{'s' if n != 1 else ''} brought back."
        if app.session.cleared:
            said += " Ctrl+Z again goes back to the other one."
        prompt = app.dash.prompt
        if question and not prompt.value and app.session.engine.capabilities.takes_input:
            prompt.value = question
            prompt.cursor_position = len(question)
            said += " The question Ctrl+L cut is in the prompt: Enter asks it again."
        app.notify(said, markup=False, timeout=8)

    def show_chat_lines(self, lines: list[tuple]) -> None:
        """The chat pane holds exactly ``lines`` (as ``chat_lines`` took them)."""
        dash = self.app.dash
        dash.chat.remove_children()
        dash.tail.show("")
        self.app.turn.reply = None
        for role, text, footer, turn_index in lines:
            m = dash.chat.note(text) if role == "note" else dash.chat.add(role, text)
            m.turn_index = turn_index
            if footer:
                m.set_footer(footer)
