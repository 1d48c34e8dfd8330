import type { CheckResult } from './runner.js';

const escapeXml = (text: string) =>
  text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

/** JUnit XML of a conformance run, for CI systems that render test reports. */
export function toJunit(results: readonly CheckResult[]): string {
  const failures = results.filter((r) => r.outcome.status === 'fail').length;
  const skipped = results.filter((r) => r.outcome.status === 'skip').length;
  const total = results.reduce((sum, r) => sum + r.durationMs, 0) / 1000;
  const cases = results.map((r) => {
    const head = `  <testcase classname="metis.conformance" name="${escapeXml(r.name)}" time="${(r.durationMs / 1000).toFixed(3)}">`;
    if (r.outcome.status === 'pass') return `${head}</testcase>`;
    if (r.outcome.status === 'skip')
      return `${head}<skipped message="${escapeXml(r.outcome.reason)}"/></testcase>`;
    const body = `expected: ${JSON.stringify(r.outcome.expected)}\nseen: ${JSON.stringify(r.outcome.seen)}`;
    return `${head}<failure message="${escapeXml(r.outcome.message)}">${escapeXml(body)}</failure></testcase>`;
  });
  return [
    '<?xml version="1.0" encoding="UTF-8"?>',
    `<testsuite name="metis-conformance" tests="${results.length}" failures="${failures}" skipped="${skipped}" time="${total.toFixed(3)}">`,
    ...cases,
    '</testsuite>',
    '',
  ].join('\n');
}
