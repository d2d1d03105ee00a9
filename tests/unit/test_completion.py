"""Shell completion generated from the parser: bash completes what a person would type next."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from services.app import completion
from services.app.cli import build_parser

BASH = shutil.which("bash")


def _complete(script: str, *words: str) -> list[str]:
    assert BASH is not None, "bash is part of the machine"
    probe = f'{script}\nCOMP_WORDS=({" ".join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}\n' \
            '_kueuelog; printf "%s\\n" "${COMPREPLY[@]}"'
    done = subprocess.run([BASH, "-c", probe], capture_output=True, text=True, check=True)
    return [line for line in done.stdout.splitlines() if line]


@pytest.mark.parametrize(("words", "want"), [
    pytest.param(("kueuelog", "ex"), ["explain"], id="a subcommand from its first letters"),
    pytest.param(("kueuelog", "get", ""), ["pending"], id="a sub-subcommand"),
    pytest.param(("kueuelog", "get", "pending", "-o", ""), ["table", "json"], id="an option's choices"),
    pytest.param(("kueuelog", "explain", "--fu"), ["--full"], id="an option of the subcommand"),
    pytest.param(("kueuelog", "run", "s"), ["scheduler", "simcluster"], id="a positional's choices"),
    pytest.param(("kueuelog", "simulate", "--from-l"), ["--from-log"], id="simulate's what-if options"),
])
def test_bash_completes(words: tuple[str, ...], want: list[str]) -> None:
    assert _complete(completion.bash(build_parser()), *words) == want


def test_file_names_where_no_word_fits(tmp_path: object) -> None:
    got = _complete(completion.bash(build_parser()), "kueuelog", "explain", "x", "--log", "/et")
    assert "/etc" in got


def test_zsh_goes_through_bashcompinit_and_the_plugin_name_is_completed_too() -> None:
    script = completion.zsh(build_parser(), "kubectl-kueuelog")
    assert script.startswith("# zsh completion") and "bashcompinit" in script
    assert "complete -F _kubectl_kueuelog kubectl-kueuelog" in script


@pytest.mark.parametrize(("words", "want"), [
    pytest.param(["ex"], (["explain"], 4), id="a subcommand, no file names"),
    pytest.param(["get", "pending", "-o", ""], (["table", "json"], 4), id="an option's choices"),
    pytest.param(["explain", "--fu"], (["--full"], 4), id="an option"),
    pytest.param(["explain", "x", "--log", ""], ([], 0), id="a value without choices: the shell's file names"),
    pytest.param([""], (sorted(["simulate", "replay", "explain", "tail", "demo", "run", "log", "schema", "serve",
                                "get", "completion", "convert", "webhook"]), 4), id="every subcommand"),
])
def test_kubectl_plugin_completion_answers_in_cobras_format(words: list[str], want: tuple[list[str], int]) -> None:
    """kubectl (>= 1.26) runs `kubectl_complete-kueuelog WORDS...` and reads one candidate a line and
    then `:DIRECTIVE` (checked by hand against kubectl 1.32's `kubectl __complete kueuelog ...`)."""
    got = completion.complete(build_parser("kubectl kueuelog"), words)
    assert (sorted(got[0]), got[1]) == (sorted(want[0]), want[1])
