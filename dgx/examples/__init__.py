"""Small programs that show dgx inside larger systems (run as modules: ``python -m dgx.examples.<name>``)."""
