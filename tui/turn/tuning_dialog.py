"""The offer at the end of "find faster settings": restart the engine with the winner
(the chat kept), or keep the settings as they are (nothing changes)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Static


class RestartWithWinner(ModalScreen[bool]):
    BINDINGS = [Binding("escape", "keep", "Keep")]

    def __init__(self, flags: str, gains: str) -> None:
        super().__init__()
        self.flags, self.gains = flags, gains

    def compose(self) -> ComposeResult:
        with Vertical(id="tune-box", classes="dialog"):
            yield Static(Content.styled(f"Faster here: {self.flags}", "bold $success"), markup=False)
            yield Static(Content(f"Measured in this engine against your settings: {self.gains}. Restart the engine "
                                 f"with {self.flags}? The chat stays; the next turn prefills it again."), markup=False)
            with Horizontal(classes="buttons"):
                yield Button("Restart with it", id="restart", variant="primary")
                yield Button("Keep my settings", id="keep")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "restart")

    def action_keep(self) -> None:
        self.dismiss(False)
