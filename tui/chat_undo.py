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
question goes back into the prompt, where Enter asks it again.
"""

from __future__ import annotations

from textual.widgets import Input

from .panes.chat import ChatLog, ChatMessage, StreamTail
from .panes.estimate import EstimatePane

UNDO_NOTICE = "New chat. Ctrl+Z (or /undo) brings the last one back."


class ChatUndo:
    """Mixed into the App: the new chat that can be undone."""

    _chat_aside: list[tuple] = []  # the put-aside chat's lines: (role, text, footer, turn index)
    _cut_question: str | None = None  # the question of the reply the last new chat cut
    _estimate_aside: tuple | None = None  # the put-aside chat's Estimate pane (EstimatePane.shown)

    def _chat_lines(self, cut: bool) -> list[tuple]:
        """The chat pane's lines; ``cut``: without the running turn's question and reply."""
        lines = [(m.role, m.text, m.footer, m.turn_index) for m in self.query_one(ChatLog).query(ChatMessage)]
        if cut:
            last_user = max((i for i, line in enumerate(lines) if line[0] == "user"), default=len(lines))
            lines = lines[:last_user]
        return lines

    def start_new_chat(self, notice: bool = True) -> None:
        """Ctrl+L (and a replay's recorded new chat): the chat is put aside, the screen cleared."""
        s = self.session
        running = s.active is not None
        question = s.active.user if running else None
        lines = self._chat_lines(cut=running)
        estimate = self.query_one(EstimatePane).shown()
        before = s.cleared
        s.new_chat()
        put_aside = s.cleared is not before
        if put_aside:
            self._chat_aside, self._cut_question, self._estimate_aside = lines, question, estimate
        self.clear_chat()
        self.forecast_border.request()  # a draft's cached prefix is gone
        if put_aside and notice:
            self.notify(UNDO_NOTICE, markup=False, timeout=8)

    def action_undo_new_chat(self) -> None:
        """Ctrl+Z or ``/undo``: the chat the last new chat put aside is back."""
        lines_now = self._chat_lines(cut=False)
        pane = self.query_one(EstimatePane)
        estimate_now = pane.shown()
        refusal = self.session.undo_new_chat()
        if refusal is not None:
            self.notify(refusal, severity="warning", markup=False, timeout=4)
            return
        lines, self._chat_aside = self._chat_aside, lines_now
        question, self._cut_question = self._cut_question, None
        self.show_chat_lines(lines)
        estimate, self._estimate_aside = self._estimate_aside, estimate_now
        if estimate is not None:
            pane.show(estimate)
        else:
            self.estimates.update()
        self.forecast_border.request()  # the draft's cached prefix is another chat's now
        n = sum(1 for m in self.session.messages if m.role == "user")
        said = f"Chat of {n} turn{'s' if n != 1 else ''} brought back."
        if self.session.cleared:
            said += " Ctrl+Z again goes back to the other one."
        prompt = self.query_one("#prompt", Input)
        if question and not prompt.value and self.session.engine.capabilities.takes_input:
            prompt.value = question
            prompt.cursor_position = len(question)
            said += " The question Ctrl+L cut is in the prompt: Enter asks it again."
        self.notify(said, markup=False, timeout=8)

    def show_chat_lines(self, lines: list[tuple]) -> None:
        """The chat pane holds exactly ``lines`` (as ``_chat_lines`` took them)."""
        chat = self.query_one(ChatLog)
        chat.remove_children()
        self.query_one(StreamTail).show("")
        self.current_reply = None
        for role, text, footer, turn_index in lines:
            m = chat.note(text) if role == "note" else chat.add(role, text)
            m.turn_index = turn_index
            if footer:
                m.set_footer(footer)

    def on_recorded_undo_new_chat(self, m) -> None:
        """Replay: the recorded user brought the last chat back."""
        self.action_undo_new_chat()
