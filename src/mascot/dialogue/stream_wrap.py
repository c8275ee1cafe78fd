"""Word-wrapping a reply that arrives piece by piece, for a terminal of a given width.

A terminal breaks an over-long line wherever its last column falls, mid-word. `StreamWrapper` is
fed the pieces as they stream and returns what to print now: whole words, each moved to a new line
when it would cross the right edge. A word is held back until the character after it arrives (it
may still grow); `finish` lets out the last one. Widths are counted in terminal cells, so wide
characters (CJK, most emoji) take two. A word wider than the whole line is cut at the edge.
"""

from __future__ import annotations

from rich.cells import cell_len


class StreamWrapper:
    def __init__(self, width: int, column: int = 0) -> None:
        self.width = max(width, 8)
        self.column = column  # cells already used on the current line (a name label, say)
        self.word = ""  # the word being received
        self.spaces = ""  # blanks between the last word printed and the next one

    def feed(self, text: str) -> str:
        """What to print now that `text` arrived."""
        out: list[str] = []
        for char in text:
            if char == "\n":
                out.append(self._place_word() + "\n")
                self.column, self.spaces = 0, ""
            elif char.isspace():
                out.append(self._place_word())
                self.spaces += " "
            else:
                self.word += char
        return "".join(out)

    def finish(self) -> str:
        """The rest, at the end of the reply."""
        rest = self._place_word()
        self.spaces = ""
        return rest

    def _place_word(self) -> str:
        """The held word, after its blanks when it fits on this line, else on the next one."""
        word, self.word = self.word, ""
        if not word:
            return ""
        size = cell_len(word)
        if self.column and self.column + cell_len(self.spaces) + size > self.width:
            lead, self.column = "\n", 0
        else:
            lead, self.column = self.spaces, self.column + cell_len(self.spaces)
        self.spaces = ""
        return lead + self._cut_to_lines(word, size)

    def _cut_to_lines(self, word: str, size: int) -> str:
        if self.column + size <= self.width:
            self.column += size
            return word
        pieces, line = [], ""
        for char in word:  # wider than a line: cut at the edge
            if self.column + cell_len(line + char) > self.width:
                pieces.append(line)
                line, self.column = "", 0
            line += char
        pieces.append(line)
        self.column += cell_len(line)
        return "\n".join(pieces)
