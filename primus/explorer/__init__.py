"""`primus explore`: a trace explorer in the browser for cost attribution, served by the program itself."""

DEFAULT_PORT = 8765
