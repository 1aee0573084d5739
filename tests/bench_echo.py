"""A stand-in for `dgx bench`'s echo callback that keeps the lines it is given (CPU tests)."""


class Echo:
    def __init__(self):
        self.lines = []

    def __call__(self, s=""):
        self.lines.append(str(s))

    @property
    def text(self):
        return "\n".join(self.lines)
