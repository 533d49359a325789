#!/usr/bin/python3
"""Reference renderer for the chat-template tests: python-jinja2 set up as Hugging Face transformers
sets it up for chat templates (immutable sandbox, loop controls, tojson as json.dumps with
ensure_ascii=False, raise_exception, strftime_now, the {% generation %} block).

Usage: jinja_reference.py CASES.json RESULTS.json
  CASES.json:   [{"template": str, "context": {...}, "trim_blocks": bool, "lstrip_blocks": bool,
                  "keep_trailing_newline": bool, "now": [Y, m, d, H, M, S] (optional)}, ...]
  RESULTS.json: [{"output": str} or {"error": "ExceptionType: message"}, ...], in case order
Exits 77 (the tests skip) when python3-jinja2 is not installed.
"""
import datetime
import json
import sys

try:
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    print("python3-jinja2 is not installed (apt-get install python3-jinja2)", file=sys.stderr)
    sys.exit(77)


def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


class GenerationBlock(Extension):
    """{% generation %}...{% endgeneration %}: renders its body (transformers marks assistant text with it)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render_body"), [], [], body).set_lineno(lineno)

    def _render_body(self, caller):
        return caller()


class Reference:
    """One environment per flag setting and one compiled template per source, as compiling dominates."""

    def __init__(self):
        self.environments = {}
        self.templates = {}
        self.now = datetime.datetime.now()

    def environment(self, flags):
        if flags not in self.environments:
            trim_blocks, lstrip_blocks, keep_trailing_newline = flags
            env = ImmutableSandboxedEnvironment(trim_blocks=trim_blocks, lstrip_blocks=lstrip_blocks,
                                                keep_trailing_newline=keep_trailing_newline,
                                                extensions=[GenerationBlock, loopcontrols])
            env.filters["tojson"] = tojson
            env.globals["raise_exception"] = raise_exception
            env.globals["strftime_now"] = lambda fmt: self.now.strftime(fmt)
            self.environments[flags] = env
        return self.environments[flags]

    def render(self, case):
        flags = (case.get("trim_blocks", True), case.get("lstrip_blocks", True),
                 case.get("keep_trailing_newline", False))
        self.now = datetime.datetime(*case["now"]) if "now" in case else datetime.datetime.now()
        key = (flags, case["template"])
        if key not in self.templates:
            self.templates[key] = self.environment(flags).from_string(case["template"])
        return self.templates[key].render(**case["context"])


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    reference = Reference()
    results = []
    for case in cases:
        try:
            results.append({"output": reference.render(case)})
        except Exception as e:  # the test compares failures too
            results.append({"error": f"{type(e).__name__}: {e}"})
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(results, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
