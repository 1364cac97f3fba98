"""Every use kvtop makes of Textual's private API, in one place.

Textual does not promise these between releases (pyproject.toml pins textual below
its next major); tests/unit/tui/test_textual_private.py calls each wrapper on a real
app, so an upgrade that renames or changes one fails there, by name, rather than as a
blank screenshot or a slow leak. Nothing else in tui/ may reach past Textual's
public API (tests/unit/tui/test_textual_private.py checks that too).

Why each is needed:

* ``forget_arrangement`` (``Widget._clear_arrangement_cache``) and ``reflow_now``
  (``Screen._compositor.reflow``, ``Compositor.layers``, ``Widget._size_updated``):
  Ctrl+S's whole-dashboard SVG (tui/sharing/full_shot.py) lays the screen out at 160 columns
  inside ``batch_update`` and puts it back, in one call. Textual's own layout posts
  Resize events and clears arrangements on its next idle, too late for a layout done
  now; handled after the shot, those events laid the screen out at the shot's size
  again, back and forth.
* ``whole_frame`` (``Compositor.render_update(full=True)``, ``App._background_screens``):
  the frame laid out that way, as Textual's own ``export_screenshot`` renders it (which
  renders the terminal's size, not a size asked for).
* ``refresh_layout`` (``Screen._refresh_layout``): once the shot is over, the screen is
  laid out afresh at once, not at the next resize.
* ``release_removed_widget_caches`` (``textual._styles_cache.StylesCache``): Textual 8.2
  memoises ``StylesCache.get_inner_outer`` with ``functools.lru_cache`` on the method,
  so up to 1,024 StylesCache objects of *removed* widgets (each holding its rendered
  lines) stay alive. After a new chat removes the transcript's widgets, clearing that
  cache lets them go (found by the soak in bench/soak.py). The only wrapper that
  tolerates its API missing: a Textual without the cache has nothing to release.
* ``drop_notices`` (``App._notifications``, ``App._unnotify``): a notice that no
  longer holds goes when the one that replaces it comes (Ctrl+L's "New chat" once
  Ctrl+Z brought the chat back: tui/turn/chat_undo.py). Textual's public API clears
  every notice or none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from textual.app import App


def forget_arrangement(widget) -> None:
    """Drop the container's arrangement computed for the old size."""
    widget._clear_arrangement_cache()


def reflow_now(screen, size) -> None:
    """Lay ``screen`` out at ``size`` now and tell each widget its new size, without the
    Resize events Textual's own layout posts."""
    screen._compositor.reflow(screen, size)
    for widget, (region, _order, _clip, virtual_size, container_size, _, _) in screen._compositor.layers:
        widget._size_updated(region.size, virtual_size, container_size)


def whole_frame(app: App):
    """The screen's whole frame as a Rich renderable, the screens below it included."""
    return app.screen._compositor.render_update(full=True, screen_stack=app._background_screens)


def refresh_layout(screen) -> None:
    """Lay ``screen`` out again now."""
    screen._refresh_layout()


def release_removed_widget_caches() -> bool:
    """Clear Textual's memo of styles caches; False when this Textual has none to clear."""
    try:
        from textual._styles_cache import StylesCache

        StylesCache.get_inner_outer.cache_clear()
    except (ImportError, AttributeError):
        return False
    return True


def drop_notices(app: App, messages: set[str]) -> None:
    """Take down the notices showing one of ``messages``; the others stay."""
    for notification in list(app._notifications):
        if notification.message in messages:
            app._unnotify(notification, refresh=False)
    app._refresh_notifications()
