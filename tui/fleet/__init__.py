"""The fleet screen's parts: its table in words (``table``), what its keys do to a row's
instance (``actions``), and its words elsewhere: the watchdog line, the quit dialog's
paragraph (``words``)."""
