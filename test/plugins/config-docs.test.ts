import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { MetisConfigSchema } from '../../src/core/config/schema.js';
import { JsonlSinkOptions } from '../../src/plugins/jsonl-sink.js';
import { OtelOptions } from '../../src/plugins/otel.js';
import { WebhookOptions } from '../../src/plugins/webhook.js';

const DOCS = join(import.meta.dirname, '../../docs');

/** Setting paths of a schema: nested objects are walked, records and arrays are one setting. */
function settingPaths(schema: z.ZodType): string[] {
  const paths: string[] = [];
  type Node = { properties?: Record<string, Node> };
  const walk = (node: Node, prefix: string) => {
    if (node.properties === undefined) {
      paths.push(prefix);
      return;
    }
    for (const [key, child] of Object.entries(node.properties)) {
      walk(child, prefix ? `${prefix}.${key}` : key);
    }
  };
  walk(z.toJSONSchema(schema, { io: 'input', unrepresentable: 'any' }) as Node, '');
  return paths;
}

function valueAt(value: unknown, path: string): unknown {
  return path.split('.').reduce<unknown>((node, key) => (node as Record<string, unknown>)?.[key], value);
}

/** The table row of a setting: `| \`path\` | default | meaning |`, padded however the formatter likes. */
function row(doc: string, path: string): string | undefined {
  return doc.split('\n').find((line) => line.split('|')[1]?.trim() === `\`${path}\``);
}

function expectDocumented(doc: string, paths: readonly string[], defaults: unknown): void {
  for (const path of paths) {
    const line = row(doc, path);
    expect(line, `${path} is not in the table`).toBeDefined();
    const value = valueAt(defaults, path);
    const cell = line!.split('|')[2]!.trim();
    if (value !== null && typeof value === 'object' && Object.keys(value).length > 0) continue;
    expect(cell, path).toBe(value === undefined ? '(required)' : `\`${JSON.stringify(value)}\``);
  }
}

describe('docs match the schemas', () => {
  it('docs/configuration.md lists every setting with its default', () => {
    const doc = readFileSync(join(DOCS, 'configuration.md'), 'utf8');
    const paths = settingPaths(MetisConfigSchema);
    expect(paths).toContain('runtime.tool_confirmation.execute');
    expectDocumented(doc, paths, MetisConfigSchema.parse({}));
  });

  it('docs/plugins.md lists every option of the built-ins with its default', () => {
    const doc = readFileSync(join(DOCS, 'plugins.md'), 'utf8');
    const section = (name: string) => doc.slice(doc.indexOf(`### \`${name}\``));
    const filterKeys = ['session_ids', 'event_types', 'actors'];
    const documented = (schema: z.ZodType) => settingPaths(schema).filter((p) => !filterKeys.includes(p));
    expectDocumented(section('jsonl-sink'), documented(JsonlSinkOptions), JsonlSinkOptions.parse({}));
    expectDocumented(
      section('webhook'),
      documented(WebhookOptions),
      WebhookOptions.partial({ url: true, secret: true }).parse({}),
    );
    expectDocumented(section('otel'), settingPaths(OtelOptions), OtelOptions.parse({}));
  });
});
