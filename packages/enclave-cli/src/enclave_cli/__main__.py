"""``enclave``: test tenant policies offline with admission's own decisions; operate tenants from a terminal.

Exit codes: 0 success; 1 a test failed, an object is invalid, or a check of ``doctor`` failed; 2 bad input
(unreadable or malformed files, unknown kinds, a test naming a missing tenant, a cluster that cannot be
reached), reported as one line ``file:line: message`` and never as a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from enclave_cli.documents import InputError
from enclave_cli.output import Style

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

_EPILOG_TEST = """examples:
  enclave test policies/                  every EnclaveTest in policies/ against the objects beside it
  enclave test policies/ --output junit > report.xml
  enclave test policies/ -k cordoned      only the cases whose name contains 'cordoned'
  enclave test policies/ --engine both    each case by the webhook and by the native policies: a difference fails
"""
_EPILOG_CHECK = """examples:
  enclave check tenants/ config.yaml
  enclave check -                         (not supported: give files or directories)
"""
_EPILOG_EXPLAIN = """examples:
  enclave explain policies/ 'alice cannot create in a cordoned tenant'   a case of the directory's tests, by name
  enclave explain policies/ request.yaml                                   a request file (a test without expect)
  enclave explain policies/ request.yaml --engine native                   as kube-apiserver's policies decide it
"""


_ENGINE: dict[str, Any] = {
    "choices": ("webhook", "native", "both"),
    "help": "the rules engine to decide with (default: the ServiceConfiguration's spec.rules.engine): webhook "
    "(admission judges every rule), native (the ValidatingAdmissionPolicies enclave-tenants compiles, judged as "
    "kube-apiserver does, and the webhook for what stays on it), both (each; a difference fails the case)",
}


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line and exit code 2 (argparse's own convention), without the whole usage."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _test(args: argparse.Namespace) -> int:
    from enclave_cli import testing

    results = testing.run(args.paths, args.enclave_namespace, args.k or "", args.engine or "")
    if not results:
        raise InputError(f"no test case matches {args.k!r}")
    if args.output == "json":
        print(testing.render_json(results))
    elif args.output == "junit":
        print(testing.render_junit(results))
    else:
        print(testing.render_table(results, Style.for_stream()))
    return EXIT_OK if all(result.passed for result in results) else EXIT_FAILED


def _check(args: argparse.Namespace) -> int:
    from enclave_cli.check import check

    problems, checked = check(args.paths, args.enclave_namespace)
    style = Style.for_stream()
    for problem in problems:
        print(style.red(str(problem)))
    print(f"{checked} object(s) checked, {len(problems)} problem(s)")
    return EXIT_FAILED if problems else EXIT_OK


def _explain(args: argparse.Namespace) -> int:
    from enclave_cli import documents, testing
    from enclave_cli.areas import parse_usage
    from enclave_cli.cases import parse_request
    from enclave_cli.explain import explain
    from enclave_cli.trace import trace
    from enclave_cli.world import compile_world

    world = testing.load_world([args.directory])
    compiled = compile_world(world, args.enclave_namespace)
    candidate = Path(args.request)
    if candidate.is_file():
        loaded = documents.load(candidate)
        if len(loaded) != 1:
            raise InputError("a request file holds exactly one request", candidate)
        request = parse_request(loaded[0], loaded[0].data, ())
        usage = parse_usage(loaded[0], loaded[0].data.get("usage"), ("usage",))
    else:
        cases = [case for case in testing.collect_cases(world) if case.name == args.request]
        if not cases:
            raise InputError(f"{args.request!r} is neither a file nor the name of a test case in {args.directory}")
        request, usage = cases[0].request, cases[0].usage
    engine = args.engine or compiled.engine
    style = Style.for_stream()
    shown = []
    for one in ("webhook", "native") if engine == "both" else (engine,):
        state = compiled.state(usage)
        outcome = testing.decide(request, usage, compiled, one)
        tenant = state.tenancy.namespace_owner.get(request.namespace, "")
        labels = compiled.namespace_labels.get(request.namespace, {})
        rules = trace(request, outcome.obj, state, compiled.tenant(tenant), labels)
        if rules is not None:
            rules.engine = one  # the engine this explanation is for, whatever the configuration says
        shown.append((outcome, explain(request, outcome, state, style, rules)))
    print("\n\n".join(text for _, text in shown))
    if len(shown) == 2:
        differences = testing.differences(shown[0][0], shown[1][0])
        for line in differences or ["the engines answer the same"]:
            print(style.red(line) if differences else style.green(line))
    return EXIT_OK


def _completion(args: argparse.Namespace) -> int:
    from enclave_cli.completion import script

    print(script(args.shell, build_parser()))
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="enclave",
        description="Test Enclave tenant policies offline with admission's own decision code, and operate "
        "tenants from a terminal.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  enclave test policies/\n  enclave check tenants/\n  enclave tenants\n"
        "  enclave doctor\n  source <(enclave completion bash)",
    )
    parser.add_argument(
        "--enclave-namespace",
        default="enclave-system",
        help="the namespace Enclave runs in (its service accounts are skipped by the namespace hooks)",
    )
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=_Parser)
    verbs.required = True

    def verb(
        name: str, help_text: str, epilog: str, run: Callable[[argparse.Namespace], int]
    ) -> argparse.ArgumentParser:
        # a verb named __x is for scripts: without help= argparse leaves it out of the verb list
        common: dict[str, Any] = {
            "description": help_text,
            "epilog": epilog,
            "formatter_class": argparse.RawDescriptionHelpFormatter,
        }
        if name.startswith("__"):
            sub = verbs.add_parser(name, **common)
        else:
            sub = verbs.add_parser(name, help=help_text, **common)
        sub.set_defaults(run=run)
        return sub

    test = verb("test", "run the EnclaveTest cases of files or directories offline", _EPILOG_TEST, _test)
    test.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="YAML files or directories")
    test.add_argument("--output", "-o", choices=("table", "json", "junit"), default="table")
    test.add_argument("-k", metavar="TEXT", help="only the cases whose name contains TEXT")
    test.add_argument("--engine", **_ENGINE)

    check = verb("check", "validate Enclave objects as the webhooks and controllers do", _EPILOG_CHECK, _check)
    check.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="YAML files or directories")

    explain = verb(
        "explain", "why a request is allowed or denied, webhook by webhook and rule by rule", _EPILOG_EXPLAIN, _explain
    )
    explain.add_argument("directory", type=Path, help="the objects (and tests) the decision is made from")
    explain.add_argument("request", help="a request file, or the name of a test case of the directory")
    explain.add_argument("--engine", **_ENGINE)

    from enclave_cli import online

    online.add_verbs(verb)

    completion = verb(
        "completion",
        "print a shell completion script",
        "examples:\n  source <(enclave completion bash)\n  enclave completion zsh > ~/.zfunc/_enclave\n"
        "  enclave completion fish > ~/.config/fish/completions/enclave.fish",
        _completion,
    )
    completion.add_argument("shell", choices=("bash", "zsh", "fish"))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["__complete"]:  # a TAB in a shell: answered without building the whole CLI
        from enclave_cli.complete import fast

        return fast(arguments[1:])
    parser = build_parser()
    args = parser.parse_args(arguments)
    try:
        code: int = args.run(args)
    except InputError as err:
        print("enclave: " + " ".join(str(err).split()), file=sys.stderr)  # one line, whatever the cause says
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return EXIT_OK
    return code


if __name__ == "__main__":
    sys.exit(main())
