"""Host callbacks on the interp device (placeholder while the plugin is brought up)."""


def register() -> None:
    pass
