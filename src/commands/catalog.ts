import { describeEventTypes, type TypeDescription } from '../core/events/describe.js';
import { table } from './text-table.js';

export interface CatalogOptions {
  json?: boolean;
  domain?: string;
  type?: string;
}

function printFields(description: TypeDescription): void {
  console.log(`\n${description.type} — ${description.description}`);
  console.log(
    `family: ${description.family}  domain: ${description.domain}  sensitivity: ${description.sensitivity}` +
      `${description.dynamic_sensitivity ? ' (dynamic, §4.4.1)' : ''}  actor: ${description.actors.join('|')}` +
      `  audit: ${description.audit ? 'yes' : 'no'}${description.parent ? `  parent: ${description.parent}` : ''}`,
  );
  const rows = [
    ['field', 'type', 'required'],
    ...description.fields.map((f) => [f.name, f.type, f.required ? 'yes' : 'no']),
  ];
  console.log(table(rows));
}

export async function catalogCommand(options: CatalogOptions): Promise<void> {
  const types = describeEventTypes({ domain: options.domain, type: options.type });
  if (options.json) {
    console.log(JSON.stringify({ types }, null, 2));
    return;
  }
  if (options.type !== undefined) {
    for (const description of types) printFields(description);
    return;
  }
  const rows = [
    ['type', 'domain', 'family', 'sensitivity', 'actor', 'audit'],
    ...types.map((t) => [
      t.type,
      t.domain,
      t.family,
      t.sensitivity,
      t.actors.join('|'),
      t.audit ? 'audit' : '',
    ]),
  ];
  console.log(table(rows));
  console.log(`\n${types.length} types. \`metis catalog --type <type>\` shows a payload's fields.`);
}
