"""Sharing without leaking: screenshots and the debug bundle (``share``), the
whole-dashboard shot (``full_shot``)."""
