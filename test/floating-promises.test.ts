// No promise left floating: a statement whose value is a Promise is awaited, returned,
// chained (.then/.catch/.finally) or marked `void` on purpose. A forgotten `await` makes a
// test race its own setup (a PostgreSQL fill still running when the job it feeds started:
// a CI failure of restore-backup.test.ts) and, in the service, loses a failure as an
// unhandled rejection instead of reporting it. Checked with the type checker over every
// file of tsconfig.json (src, db, emails, test, bench).
import { expect, test } from "bun:test";
import ts from "typescript";
import { join } from "node:path";

const ROOT = join(import.meta.dir, "..");

/**
 * Methods whose promise is, by their nature, not waited for where they are called: a
 * server's or a pool connection's stop and release, a stream's write, flush and end (their
 * errors surface on the stream), a test environment's cleanup in afterEach, and the
 * handlers a chain attaches.
 */
const LEFT_ON_PURPOSE = new Set(["stop", "release", "cleanup", "write", "flush", "end", "then", "catch", "finally"]);

function floatingPromises(): string[] {
  const config = ts.readConfigFile(join(ROOT, "tsconfig.json"), ts.sys.readFile);
  const parsed = ts.parseJsonConfigFileContent(config.config, ts.sys, ROOT);
  const program = ts.createProgram(parsed.fileNames, parsed.options);
  const checker = program.getTypeChecker();
  const isPromise = (t: ts.Type): boolean => {
    if (t.isUnion()) return t.types.some(isPromise);
    const name = (t.getSymbol() ?? t.aliasSymbol)?.getName();
    return name === "Promise" || name === "PromiseLike";
  };
  const found: string[] = [];
  for (const file of program.getSourceFiles()) {
    if (file.isDeclarationFile || file.fileName.includes("/node_modules/")) continue;
    const visit = (node: ts.Node): void => {
      if (ts.isExpressionStatement(node)) {
        const e = node.expression;
        const call = ts.isCallExpression(e) ? e : null;
        const method = call && ts.isPropertyAccessExpression(call.expression) ? call.expression.name.text : null;
        // `x ??= (async () => …)()`: a memoised promise, awaited where it is read.
        const memo = ts.isBinaryExpression(e) && e.operatorToken.kind !== ts.SyntaxKind.EqualsToken;
        // `x = f()`: the promise is kept to be awaited later.
        const kept = ts.isBinaryExpression(e) && e.operatorToken.kind === ts.SyntaxKind.EqualsToken;
        if (!ts.isVoidExpression(e) && !ts.isAwaitExpression(e) && !memo && !kept && !(method && LEFT_ON_PURPOSE.has(method)) && isPromise(checker.getTypeAtLocation(e))) {
          const { line } = file.getLineAndCharacterOfPosition(node.getStart());
          found.push(`${file.fileName.slice(ROOT.length + 1)}:${line + 1}: ${node.getText().split("\n")[0]}`);
        }
      }
      ts.forEachChild(node, visit);
    };
    visit(file);
  }
  return found;
}

test("every promise a statement makes is awaited, returned, chained or marked void", () => {
  expect(floatingPromises()).toEqual([]);
}, 120_000);
