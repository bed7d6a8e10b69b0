"""Just enough of CMake's language to take definitions and one ``if`` chain out of a project's
files and check that they only compute (``set``, ``list``, ``string``, ``if``, ``foreach`` ...):
the preflight runs them with ``cmake -P``, and nothing it runs may touch files, run processes or
include other code. Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Commands that only compute on variables (no file, process or network access, no includes).
PURE = frozenset({
    "set", "unset", "list", "string", "math", "if", "elseif", "else", "endif", "foreach", "endforeach",
    "while", "endwhile", "break", "continue", "return", "message", "function", "endfunction", "macro",
    "endmacro",
})
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Command:
    """One command invocation: its name (lower case), argument text, where it starts and ends, and line."""

    name: str
    args: str
    start: int
    end: int
    line: int


def commands(text: str) -> list[Command]:
    """Every top-level command invocation in ``text``, in order (comments and strings skipped)."""
    out: list[Command] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "#":
            bracket = re.match(r"#\[(=*)\[", text[i:])
            if bracket:
                close = text.find("]" + bracket.group(1) + "]", i)
                i = n if close < 0 else close + len(bracket.group(1)) + 2
            else:
                newline = text.find("\n", i)
                i = n if newline < 0 else newline
            continue
        name = _NAME.match(text, i)
        if name is None or (i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_")):
            i += 1
            continue
        j = name.end()
        while j < n and text[j] in " \t":
            j += 1
        if j >= n or text[j] != "(":
            i = name.end()
            continue
        end = _close(text, j)
        out.append(Command(name.group(0).lower(), text[j + 1:end], i, end + 1, text.count("\n", 0, i) + 1))
        i = end + 1
    return out


def _close(text: str, open_at: int) -> int:
    """The index of the ``)`` that closes the ``(`` at ``open_at`` (quotes and comments skipped)."""
    depth, i, n = 0, open_at, len(text)
    while i < n:
        ch = text[i]
        if ch == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif ch == "#":
            newline = text.find("\n", i)
            i = n if newline < 0 else newline
            continue
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise ValueError(f"unbalanced parentheses from line {text.count(chr(10), 0, open_at) + 1}")


def definition(text: str, name: str) -> tuple[str, list[Command]] | None:
    """The text of ``function(NAME ...)`` or ``macro(NAME ...)`` up to its end, and its commands."""
    found = commands(text)
    for index, cmd in enumerate(found):
        if cmd.name in ("function", "macro") and cmd.args.split() and cmd.args.split()[0] == name:
            closing = "end" + cmd.name
            for later in found[index + 1:]:
                if later.name == closing:
                    return text[cmd.start:later.end], commands(text[cmd.start:later.end])
            return None
    return None


def if_chain(text: str, variable: str) -> tuple[str, list[Command]] | None:
    """The whole ``if() ... endif()`` that first sets ``variable`` in one of its branches."""
    found = commands(text)
    setter = next((k for k, c in enumerate(found) if c.name == "set" and c.args.split()[:1] == [variable]), None)
    if setter is None:
        return None
    depth, begin = 0, None
    for k in range(setter - 1, -1, -1):
        if found[k].name == "endif":
            depth += 1
        elif found[k].name == "if":
            if depth == 0:
                begin = k
                break
            depth -= 1
    if begin is None:
        return None
    depth = 0
    for k in range(begin, len(found)):
        if found[k].name == "if":
            depth += 1
        elif found[k].name == "endif":
            depth -= 1
            if depth == 0:
                start, end = found[begin].start, found[k].end
                return text[start:end], commands(text[start:end])
    return None


def impure(cmds: list[Command], allowed: frozenset[str] = PURE) -> list[Command]:
    """The commands that are not plain computation (nor one of ``allowed``)."""
    return [c for c in cmds if c.name not in allowed]


_BRACKET_OPEN = re.compile(r"\[=*\[")


def strict(text: str) -> list[str]:
    """The command names of ``text`` under a strict subset of CMake's syntax, or ValueError.

    ``commands`` finds commands leniently; the preflight runs only text that this reader also
    understands and in which it finds the very same commands: whitespace, ``#`` line comments
    between commands, and commands whose arguments are quoted (``"..."`` with escapes) or
    unquoted words without backslashes, quotes or ``#``. Bracket arguments and comments
    (``[[...]]``, ``#[[...]]``), escapes outside quotes and comments inside an argument list are
    refused: each is a place where a reader that is not CMake could see other commands than
    CMake runs.
    """
    names: list[str] = []
    i, n = 0, len(text)

    def fail(what: str) -> ValueError:
        return ValueError(f"{what} at line {text.count(chr(10), 0, i) + 1}: CMake syntax the preflight does not read")

    while i < n:
        ch = text[i]
        if ch in " \t\r\n":
            i += 1
            continue
        if ch == "#":
            if _BRACKET_OPEN.match(text, i + 1):
                raise fail("a bracket comment")
            newline = text.find("\n", i)
            i = n if newline < 0 else newline
            continue
        name = _NAME.match(text, i)
        if name is None:
            raise fail(f"{ch!r} where a command should start")
        i = name.end()
        while i < n and text[i] in " \t":
            i += 1
        if i >= n or text[i] != "(":
            raise fail(f"{name.group(0)} without an argument list")
        depth, i = 1, i + 1
        while depth:
            if i >= n:
                raise fail(f"{name.group(0)}( never closed")
            ch = text[i]
            if ch in " \t\r\n":
                i += 1
            elif ch in "()":
                depth += 1 if ch == "(" else -1
                i += 1
            elif ch == '"':
                i += 1
                while True:
                    if i >= n:
                        raise fail("a quoted argument never closed")
                    if text[i] == "\\":
                        i += 2
                    elif text[i] == '"':
                        i += 1
                        break
                    else:
                        i += 1
                if i < n and text[i] not in " \t\r\n()":
                    raise fail("text right after a quoted argument")
            elif ch in "#\\":
                raise fail("a comment or an escape inside an argument list")
            else:
                while i < n and text[i] not in ' \t\r\n()"#\\':
                    if text[i] == "[" and _BRACKET_OPEN.match(text, i):
                        raise fail("a bracket argument")
                    i += 1
                if i < n and text[i] in '"#\\':
                    raise fail("a quote, escape or comment inside an unquoted argument")
        names.append(name.group(0).lower())
    return names
