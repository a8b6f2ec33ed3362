"""Shell completion scripts generated from the parser, so they never fall behind the verbs and flags."""

from __future__ import annotations

import argparse


def _verbs(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for action in parser._actions:  # argparse has no public API for its subcommands
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[name] = sorted(o for a in sub._actions for o in a.option_strings)
    return found


def script(shell: str, parser: argparse.ArgumentParser) -> str:
    verbs = _verbs(parser)
    if shell == "bash":
        cases = "\n".join(f'        {verb}) opts="{" ".join(flags)}" ;;' for verb, flags in verbs.items())
        return f"""# bash completion for enclave: source <(enclave completion bash)
_enclave() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" verb="" opts="" word
    for word in "${{COMP_WORDS[@]:1:COMP_CWORD-1}}"; do
        case "$word" in -*) ;; *) verb="$word"; break ;; esac
    done
    if [ -z "$verb" ]; then
        COMPREPLY=($(compgen -W "{" ".join(verbs)} --help --enclave-namespace" -- "$cur"))
        return
    fi
    case "$verb" in
{cases}
    esac
    if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "$opts" -- "$cur"))
    else
        COMPREPLY=($(compgen -f -- "$cur"))
    fi
}}
complete -o filenames -F _enclave enclave
"""
    lines = [f"'{verb}:{parser_help}'" for verb, parser_help in ((v, v) for v in verbs)]
    return f"""#compdef enclave
# zsh completion for enclave: enclave completion zsh > "${{fpath[1]}}/_enclave"
_enclave() {{
    if (( CURRENT == 2 )); then
        _describe 'verb' '({" ".join(lines)})'
    else
        _files
    fi
}}
_enclave "$@"
"""
