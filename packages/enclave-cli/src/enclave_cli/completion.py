"""Shell completion scripts generated from the parser, so they never fall behind the verbs and flags.

Verbs and flags are static (written into the script); tenant names are dynamic: completing the argument of
``enclave cordon``/``uncordon`` runs ``enclave __complete tenants`` with the ``--kubeconfig``/``--context``
already typed on the line, which lists the Tenants of that cluster with a short timeout and prints nothing
when the cluster cannot be reached (offline, the shell simply offers no names).
"""

from __future__ import annotations

import argparse

from enclave_cli.complete import COMPLETE_VERB, TENANT_VERBS


def _verbs(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for action in parser._actions:  # argparse has no public API for its subcommands
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if not name.startswith("__"):
                    found[name] = sorted(o for a in sub._actions for o in a.option_strings)
    return found


def _bash(verbs: dict[str, list[str]]) -> str:
    cases = "\n".join(f'        {verb}) opts="{" ".join(flags)}" ;;' for verb, flags in verbs.items())
    tenant_verbs = "|".join(TENANT_VERBS)
    return f"""# bash completion for enclave: source <(enclave completion bash)
_enclave() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" verb="" opts="" word i
    local -a cluster=()
    for word in "${{COMP_WORDS[@]:1:COMP_CWORD-1}}"; do
        case "$word" in -*) ;; *) verb="$word"; break ;; esac
    done
    for ((i = 1; i < COMP_CWORD; i++)); do
        case "${{COMP_WORDS[i]}}" in
            --kubeconfig|--context) cluster+=("${{COMP_WORDS[i]}}" "${{COMP_WORDS[i+1]}}") ;;
        esac
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
        return
    fi
    case "$verb" in
        {tenant_verbs})
            COMPREPLY=($(compgen -W "$(enclave {COMPLETE_VERB} tenants "${{cluster[@]}}" 2>/dev/null)" -- "$cur"))
            return ;;
    esac
    COMPREPLY=($(compgen -f -- "$cur"))
}}
complete -o filenames -F _enclave enclave
"""


def _zsh(verbs: dict[str, list[str]]) -> str:
    described = " ".join(f"'{verb}'" for verb in verbs)
    tenant_verbs = "|".join(TENANT_VERBS)
    return f"""#compdef enclave
# zsh completion for enclave: enclave completion zsh > "${{fpath[1]}}/_enclave"
_enclave() {{
    local -a cluster
    local i
    for ((i = 2; i < CURRENT; i++)); do
        case "${{words[i]}}" in
            --kubeconfig|--context) cluster+=("${{words[i]}}" "${{words[i+1]}}") ;;
        esac
    done
    if (( CURRENT == 2 )); then
        _describe 'verb' '({described})'
    elif [[ "${{words[CURRENT]}}" != -* && "${{words[2]}}" == ({tenant_verbs}) ]]; then
        local -a tenants
        tenants=(${{(f)"$(enclave {COMPLETE_VERB} tenants "${{cluster[@]}}" 2>/dev/null)"}})
        compadd -a tenants
    else
        _files
    fi
}}
_enclave "$@"
"""


def _fish(verbs: dict[str, list[str]]) -> str:
    lines = [
        "# fish completion for enclave: enclave completion fish > ~/.config/fish/completions/enclave.fish",
        "function __enclave_cluster_flags",
        "    set -l words (commandline -opc)",
        "    for i in (seq (count $words))",
        "        if contains -- $words[$i] --kubeconfig --context",
        "            set -l next (math $i + 1)",
        "            test $next -le (count $words); and printf '%s\\n' $words[$i] $words[$next]",
        "        end",
        "    end",
        "end",
        "complete -c enclave -f",
        f"complete -c enclave -n __fish_use_subcommand -a '{' '.join(verbs)}'",
    ]
    for verb, flags in verbs.items():
        for flag in flags:
            if flag.startswith("--"):
                lines.append(f"complete -c enclave -n '__fish_seen_subcommand_from {verb}' -l {flag[2:]}")
            elif len(flag) == 2:
                lines.append(f"complete -c enclave -n '__fish_seen_subcommand_from {verb}' -s {flag[1:]}")
    for verb in ("test", "check", "explain"):
        lines.append(f"complete -c enclave -n '__fish_seen_subcommand_from {verb}' -F")
    lines.append(
        f"complete -c enclave -n '__fish_seen_subcommand_from {' '.join(TENANT_VERBS)}' "
        f"-a '(enclave {COMPLETE_VERB} tenants (__enclave_cluster_flags) 2>/dev/null)'"
    )
    return "\n".join(lines) + "\n"


def script(shell: str, parser: argparse.ArgumentParser) -> str:
    verbs = _verbs(parser)
    if shell == "bash":
        return _bash(verbs)
    if shell == "fish":
        return _fish(verbs)
    return _zsh(verbs)
