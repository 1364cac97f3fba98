"""Ctrl+L keeps what it clears: a new chat puts the old one aside, and Ctrl+Z (or
``/undo``) brings it back.

Why: many users press Ctrl+L out of habit, to redraw the terminal, and lost the whole
conversation. Now the notice after a new chat says how to get it back. What is put
aside is the session's messages (``ChatSession.undo_new_chat``: the next turn sends
them again, and the engine keeps the prefix its KV cache shares with them and prefills
the rest), the chat pane's lines as they were shown (each reply with its footer and
its waterfall on click), the Estimate pane's rows and forecast (the last turn's
measured column and verdict: Ctrl+L clears them, so Ctrl+Z brings them back) and the
Prefill and Decode panes' last turn. Ctrl+L also empties the KV cache, and Ctrl+Z does
not fill it: the Prefill pane says so ("KV cache cleared by Ctrl+L: the next turn
prefills this chat again (≈47 tokens)"), where it said "no turn yet" beside a chat of
turns. Each notice of a new chat or an undo replaces the last one: the "New chat"
notice stayed up beside "Chat of 1 turn brought back", and a second Ctrl+L and Ctrl+Z
stacked every notice twice. An undo
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
        self.panes_aside: tuple | None = None  # its Prefill and Decode panes (``shown``); None: a turn was cut
        # whose tokens the KV cache holds: None (emptied by Ctrl+L), "current" or "aside" chat's
        self.cache_holds: str | None = None
        self.messages_seen = 0  # the chat's messages when it came on screen: more, and a turn filled the cache
        self.last_notice: str | None = None

    def notify(self, text: str) -> None:
        """A new chat's or an undo's notice, in place of the last one (which no longer holds)."""
        from kvtop.tui.base.textual_private import drop_notices

        if self.last_notice is not None:
            drop_notices(self.app, {self.last_notice})
        self.last_notice = text
        self.app.notify(text, markup=False, timeout=8)

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
        panes = None if running else (app.dash.prefill.shown(), app.dash.decode.shown())
        before = s.cleared
        s.new_chat()
        put_aside = s.cleared is not before
        if put_aside:
            self.chat_aside, self.cut_question, self.estimate_aside = lines, question, estimate
            self.panes_aside = panes
        self.cache_holds, self.messages_seen = None, 0  # the engine's cache is reset (ChatSession.new_chat)
        app.turn.clear()
        prompt = app.dash.prompt
        if (not put_aside and question and notice and not prompt.value
                and app.session.engine.capabilities.takes_input):
            # the chat's first turn cut: nothing to bring back, so its question is back at once
            prompt.value = question
            prompt.cursor_position = len(question)
            self.notify(CUT_FIRST_NOTICE)
        elif put_aside and notice:
            self.notify(UNDO_NOTICE)
        app.forecast_border.request()  # a draft's cached prefix is gone

    def bring_back(self) -> None:
        """Ctrl+Z or ``/undo``: the chat the last new chat put aside is back."""
        app = self.app
        lines_now = self.chat_lines(cut=False)
        pane = app.dash.estimate
        estimate_now = pane.shown()
        panes_now = (app.dash.prefill.shown(), app.dash.decode.shown())
        refusal = app.session.undo_new_chat()
        if refusal is not None:
            app.notify(refusal, severity="warning", markup=False, timeout=4)
            return
        if len(app.session.cleared) != self.messages_seen:  # a turn ran on the chat put aside now
            self.cache_holds = "current"
        self.cache_holds = {"current": "aside", "aside": "current"}.get(self.cache_holds or "")
        self.messages_seen = len(app.session.messages)
        panes, self.panes_aside = self.panes_aside, panes_now
        lines, self.chat_aside = self.chat_aside, lines_now
        question, self.cut_question = self.cut_question, None
        self.show_chat_lines(lines)
        self.show_turn_panes(panes, lines)
        estimate, self.estimate_aside = self.estimate_aside, estimate_now
        if estimate is not None:
            pane.show(estimate)
        else:
            app.estimates.update()
        app.forecast_border.request()  # the draft's cached prefix is another chat's now
        app.quality.chat_back()  # F7's lines of this chat say so again
        n = sum(1 for m in app.session.messages if m.role == "user")
        said = f"Chat of {n} turn{'s' if n != 1 else ''} brought back."
        if app.session.cleared:
            said += " Ctrl+Z again goes back to the other one."
        prompt = app.dash.prompt
        if question and not prompt.value and app.session.engine.capabilities.takes_input:
            prompt.value = question
            prompt.cursor_position = len(question)
            said += " The question Ctrl+L cut is in the prompt: Enter asks it again."
        self.notify(said)

    def show_turn_panes(self, panes: tuple | None, lines: list[tuple]) -> None:
        """The Prefill and Decode panes of the chat brought back: its last turn as they
        showed it (``panes``), or as its record has it (a turn Ctrl+L cut left no figures
        of the chat's own), and what the KV cache holds for the next turn."""
        dash = self.app.dash
        indexes = [i for _role, _text, _footer, i in lines if i is not None and 0 <= i < len(self.app.turns)]
        last = self.app.turns[max(indexes)] if indexes else None
        note = None
        if self.app.session.messages and self.cache_holds != "current":
            from kvtop.tui.base.format import fmt_int

            if dash.kv.cells:
                head = "KV cache holds the other chat"
            else:
                head = "KV cache cleared by Ctrl+L" if self.cache_holds is None else "KV cache empty"
            tokens = last.metrics.kv_cells_used if last is not None else 0
            note = f"{head}: the next turn prefills this chat again" + (f" (≈{fmt_int(tokens)} tokens)" if tokens else "")
        if panes is not None:
            dash.prefill.show(panes[0], note)
            dash.decode.show(panes[1])
            return
        dash.prefill.show(None, note)
        dash.decode.clear()
        if last is not None:
            dash.prefill.reused = last.metrics.reused_tokens
            dash.prefill.finish(last.metrics, last.stop_reason)
            dash.decode.finish(last.metrics, ())

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
