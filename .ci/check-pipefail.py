#!/usr/bin/env python3
"""Fail when a GitHub workflow step (or a composite action's step) pipes an `ocm-lab` command without `pipefail` in effect.

Why: GitHub runs a `run:` step with `bash -e {0}` unless `shell: bash` is given explicitly (then it is
`bash --noprofile --norc -eo pipefail {0}`). Without pipefail, `ocm-lab up ... | tee up.jsonl` takes the
status of `tee`, so a failing `up` passes the step, and the `if: failure()` diagnostics steps never run.

pipefail is in effect for a step when its shell (the step's `shell:`, else the job's `defaults.run.shell`,
else the workflow's `defaults.run.shell`) is exactly `bash`, or a custom shell command that contains
`pipefail`, or when the script runs `set -o pipefail` (also `set -eo pipefail`, `set -euo pipefail`, ...)
before the pipeline.

A pipeline is flagged when an `ocm-lab` command stands in any stage but the last one (`|` and `|&`; `||` is
an "or", not a pipe). Quotes, comments and `${{ ... }}` expressions are understood well enough for workflow
scripts; heredocs are not (none are used here).

Usage: check-pipefail.py FILE...   |   check-pipefail.py --self-test
"""

import re
import sys

import yaml

# The command `ocm-lab` (any path to it), or the variable the action keeps its path in (`"$OCM_LAB"`).
OCM_LAB_WORD = re.compile(
    r"(?:^|[\s;&(|/\"'])ocm-lab(?=$|[\s;&)|\"'])|\$\{?OCM_LAB\}?(?![A-Za-z0-9_])"
)
SET_PIPEFAIL = re.compile(r"^\s*set\s+(?:[-+]\w+\s+)*-\w*o\s+pipefail\b")
UNSET_PIPEFAIL = re.compile(r"^\s*set\s+(?:[-+]\w+\s+)*\+\w*o\s+pipefail\b")
EXPRESSION = re.compile(r"\$\{\{.*?\}\}", re.S)


class LineLoader(yaml.SafeLoader):
    """A SafeLoader that records each mapping's 1-based line as the key `__line__`."""


def _construct_mapping(loader, node, deep=False):
    mapping = yaml.SafeLoader.construct_mapping(loader, node, deep=deep)
    mapping["__line__"] = node.start_mark.line + 1
    return mapping


LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def pipelines(script):
    """Yield (line offset, [stage text, ...]) for every pipeline in a shell script.

    A small lexer: quotes ('...', "...", backslash escapes), comments, line continuations, and the
    separators `;`, `&`, `&&`, `||`, newline (which end a pipeline) and `|`, `|&` (which end a stage).
    A newline right after `|`, `&&` or `||` continues the command, as in the shell."""
    script = EXPRESSION.sub("EXPR", script)
    stages, current = [], []
    line, start_line = 0, 0
    i, n = 0, len(script)
    pending_continuation = False

    def finish():
        nonlocal stages, current
        text = "".join(current).strip()
        if text or stages:
            stages.append(text)
        result = [s for s in stages if s]
        stages, current = [], []
        return result

    while i < n:
        c = script[i]
        if c == "\\" and i + 1 < n:
            if script[i + 1] == "\n":
                line += 1
                current.append(" ")
            else:
                current.append(script[i : i + 2])
            i += 2
            continue
        if c == "'":
            j = script.find("'", i + 1)
            j = n - 1 if j < 0 else j
            line += script.count("\n", i, j + 1)
            current.append(script[i : j + 1])
            i = j + 1
            continue
        if c == '"':
            j = i + 1
            while j < n and script[j] != '"':
                j += 2 if script[j] == "\\" else 1
            line += script.count("\n", i, j + 1)
            current.append(script[i : j + 1])
            i = j + 1
            continue
        if c == "#" and (not current or current[-1][-1:].isspace() or "".join(current).strip() == ""):
            j = script.find("\n", i)
            i = n if j < 0 else j
            continue
        if c == "|":
            if script[i : i + 2] == "||":
                found = finish()
                if len(found) > 1:
                    yield start_line, found
                start_line = line
                pending_continuation = True
                i += 2
                continue
            stages.append("".join(current).strip())
            current = []
            pending_continuation = True
            i += 2 if script[i : i + 2] == "|&" else 1
            continue
        if c in ";&":
            found = finish()
            if len(found) > 1:
                yield start_line, found
            start_line = line
            pending_continuation = script[i : i + 2] == "&&"
            i += 2 if script[i : i + 2] == "&&" else 1
            continue
        if c == "\n":
            line += 1
            if pending_continuation or not ("".join(current).strip() or stages):
                i += 1
                if not "".join(current).strip():
                    start_line = line if not stages else start_line
                continue
            found = finish()
            if len(found) > 1:
                yield start_line, found
            start_line = line
            i += 1
            continue
        if not c.isspace():
            pending_continuation = False
        current.append(c)
        i += 1
    found = finish()
    if len(found) > 1:
        yield start_line, found


def shell_sets_pipefail(shell):
    if shell is None:
        return False
    shell = str(shell).strip()
    return shell == "bash" or "pipefail" in shell


def script_pipefail_before(script, upto_line):
    """Whether the script turns pipefail on (and not off again) before line `upto_line` (0-based)."""
    on = False
    for text in script.split("\n")[:upto_line]:
        if SET_PIPEFAIL.search(text):
            on = True
        elif UNSET_PIPEFAIL.search(text):
            on = False
    return on


def run_defaults_shell(node):
    defaults = node.get("defaults") if isinstance(node, dict) else None
    run = defaults.get("run") if isinstance(defaults, dict) else None
    return run.get("shell") if isinstance(run, dict) else None


def check_steps(steps, default_shell, name, owner):
    """Problems of a list of steps (a job's, or a composite action's) whose shell defaults to `default_shell`."""
    problems = []
    for index, step in enumerate(steps or []):
        if not isinstance(step, dict) or "run" not in step:
            continue
        script = str(step["run"])
        shell = step.get("shell", default_shell)
        if shell_sets_pipefail(shell):
            continue
        for offset, stages in pipelines(script):
            piped = [s for s in stages[:-1] if OCM_LAB_WORD.search(s)]
            if not piped or script_pipefail_before(script, offset):
                continue
            step_name = step.get("name", f"#{index + 1}")
            where = f"{name}:{step.get('__line__', '?')}"
            problems.append(
                f"{where}: {owner}, step {step_name!r} pipes an ocm-lab command without "
                f"pipefail (shell: {shell or 'default, bash -e'}): {' | '.join(stages)}\n"
                f"    the step would take the status of {stages[-1].split()[0]!r}, not of ocm-lab; "
                f"set `shell: bash` (step, job or workflow `defaults.run.shell`) or `set -o pipefail`"
            )
    return problems


def check_workflow(doc, name):
    """Return a list of problems, one line each. `doc` is a workflow, or a composite action (action.yml:
    its `runs.steps`, where each run step names its own shell)."""
    problems = []
    if not isinstance(doc, dict):
        return problems
    runs = doc.get("runs")
    if isinstance(runs, dict):
        problems += check_steps(runs.get("steps"), None, name, "composite action")
    workflow_shell = run_defaults_shell(doc)
    jobs = doc.get("jobs") or {}
    for job_id, job in jobs.items():
        if job_id == "__line__" or not isinstance(job, dict):
            continue
        job_shell = run_defaults_shell(job)
        shell = job_shell if job_shell is not None else workflow_shell
        problems += check_steps(job.get("steps"), shell, name, f"job {job_id!r}")
    return problems


def check_text(text, name):
    return check_workflow(yaml.load(text, Loader=LineLoader), name)


SAMPLES = [
    # (description, expected problem count, workflow text)
    ("default shell, ocm-lab piped into tee", 1, """
jobs:
  lab:
    steps:
      - name: Up
        run: ./target/release/ocm-lab up -t default --output json | tee up.jsonl
"""),
    ("workflow defaults shell bash", 0, """
defaults:
  run:
    shell: bash
jobs:
  lab:
    steps:
      - run: ./target/release/ocm-lab up --output json | tee up.jsonl
"""),
    ("job defaults shell bash", 0, """
jobs:
  lab:
    defaults:
      run:
        shell: bash
    steps:
      - run: ocm-lab verify --output json | tee verify.jsonl
"""),
    ("step shell bash", 0, """
jobs:
  lab:
    steps:
      - shell: bash
        run: ocm-lab verify | tee verify.txt
"""),
    ("step shell overrides the workflow default with a shell lacking pipefail", 1, """
defaults:
  run:
    shell: bash
jobs:
  lab:
    steps:
      - shell: bash -e {0}
        run: ocm-lab up | tee up.txt
"""),
    ("set -euo pipefail first", 0, """
jobs:
  lab:
    steps:
      - run: |
          set -euo pipefail
          ocm-lab up --output json | tee up.jsonl
"""),
    ("set -o pipefail only after the pipeline", 1, """
jobs:
  lab:
    steps:
      - run: |
          ocm-lab up | tee up.txt
          set -o pipefail
"""),
    ("|| is not a pipe; a quoted | is not a pipe; jq pipes are not ocm-lab", 0, """
jobs:
  lab:
    steps:
      - run: |
          ocm-lab down || true
          echo 'ocm-lab up | tee' ; ocm-lab status
          jq '.a | .b' up.jsonl | head -n 3
          # ocm-lab up | tee (a comment)
"""),
    ("continued line and pipe at the end of a line", 2, """
jobs:
  lab:
    steps:
      - run: |
          ./target/release/ocm-lab up \\
            --output json | tee up.jsonl
          ocm-lab verify --output json |
            tee verify.jsonl
"""),
    ("ocm-lab only in the last stage", 0, """
jobs:
  lab:
    steps:
      - run: cat plan.yaml | ocm-lab apply -f -
"""),
    ("|& pipes too; shell sh has no pipefail", 1, """
jobs:
  lab:
    steps:
      - shell: sh
        run: ocm-lab up -t "${{ matrix.topology || 'default' }}" |& tee up.txt
"""),
    ("composite action: a run step with shell sh pipes ocm-lab", 1, """
runs:
  using: composite
  steps:
    - shell: bash
      run: ocm-lab up --output json | tee up.jsonl
    - shell: sh
      run: '"$OCM_LAB" verify | tee verify.txt'
"""),
    ("composite action: shell bash, and set -o pipefail under sh", 0, """
runs:
  using: composite
  steps:
    - shell: bash
      run: '"$OCM_LAB" "${args[@]}" | tee "$WORK/up.jsonl"'
    - shell: sh -e {0}
      run: |
        set -o pipefail
        ocm-lab verify | tee verify.txt
"""),
    ("ocm-lab-state is not the command, nor is $OCM_LAB_STATE_DIR", 0, """
jobs:
  lab:
    steps:
      - run: ls .ocm-lab-state | wc -l
      - run: ls "$OCM_LAB_STATE_DIR" | wc -l
"""),
]


def self_test():
    failures = 0
    for description, expected, text in SAMPLES:
        problems = check_text(text, "<sample>")
        ok = len(problems) == expected
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {description}: {len(problems)} problem(s), expected {expected}")
        if not ok:
            for p in problems:
                print("     " + p)
    if failures:
        print(f"check-pipefail self-test: {failures} of {len(SAMPLES)} samples failed")
        return 1
    print(f"check-pipefail self-test: all {len(SAMPLES)} samples passed")
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    problems = []
    for path in argv[1:]:
        with open(path, encoding="utf-8") as f:
            problems += check_text(f.read(), path)
    for p in problems:
        print(p)
    if problems:
        print(f"check-pipefail: {len(problems)} step(s) pipe ocm-lab without pipefail")
        return 1
    print(f"check-pipefail: {len(argv) - 1} workflow/action file(s), no ocm-lab pipeline without pipefail")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
