import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { CATALOG } from '../../src/core/events/catalog/index.js';
import { expectCatalogShape, storedTurn } from '../helpers/scripted-turn.js';
import { startTestServer } from '../helpers/server.js';
import { tempDir } from '../helpers/tmp.js';

/** Issue 33 (skills): skill_load, skill_search and `always` skills, driven by the scripted model. */

const ofType = (events: any[], type: string) => events.filter((e) => e.type === type);

/** The catalog's rules for the event, checked on what was stored: payload keys, sensitivity, actor, parent. */
function followsCatalog(event: any, events: any[], parentType: string) {
  const parent = expectCatalogShape(event, events);
  expect(parent?.type).toBe(parentType);
  // The catalog's parent rule names that type (for skill.loaded: one of its two cases).
  expect(CATALOG.get(event.type)!.parent).toContain(
    parentType === 'session.created' ? 'session.' : parentType,
  );
}

function writeSkill(root: string, name: string, front: string, body: string): string {
  mkdirSync(join(root, name), { recursive: true });
  const path = join(root, name, 'SKILL.md');
  writeFileSync(path, `---\n${front}\n---\n\n${body}\n`);
  return path;
}

async function serverWithSkills(budget = 8000) {
  const global = tempDir('metis-skills-');
  const t = await startTestServer({ skills: { budget_tokens: budget, global_dir: global } });
  const workspace = join(t.workspace, '.metis', 'skills');
  return { t, global, workspace };
}

describe('skills', () => {
  it('always skills load at the first turn (parent session.created), the workspace one over the global one', async () => {
    const { t, global, workspace } = await serverWithSkills();
    writeSkill(global, 'style', 'name: style\ndescription: house style\nload: always', 'GLOBAL STYLE RULES');
    writeSkill(
      workspace,
      'style',
      'name: style\ndescription: house style here\nload: always',
      'WORKSPACE STYLE',
    );
    writeSkill(global, 'pdf-forms', 'name: pdf-forms\ndescription: fill PDF forms', 'Use pdftk.');
    const session = await t.createSession();

    const first = await storedTurn(t, session, 'recall');
    const loaded = ofType(first.events, 'skill.loaded');
    expect(loaded).toHaveLength(1);
    followsCatalog(loaded[0], first.all, 'session.created');
    expect(loaded[0].actor).toBe('system');
    expect(loaded[0].payload).toEqual({
      skill_id: 'style',
      skill_version: expect.stringMatching(/^sha256:[0-9a-f]{12}$/),
      load_reason: 'always',
      load_size_tokens: Math.ceil('WORKSPACE STYLE'.length / 4),
      source: 'workspace',
      triggered_by_tool_use_id: null,
    });
    // Loaded before the first model call, into its system prompt; the on-demand skill is only named.
    const callStarted = ofType(first.events, 'llm.call_started')[0];
    const at = (event: any) => first.all.findIndex((e) => e.id === event.id);
    expect(at(loaded[0])).toBeGreaterThanOrEqual(0);
    expect(at(loaded[0])).toBeLessThan(at(callStarted));
    expect(first.text).toContain('WORKSPACE STYLE');
    expect(first.text).not.toContain('GLOBAL STYLE RULES');
    expect(first.text).toContain('- pdf-forms: fill PDF forms');
    expect(first.text).not.toContain('Use pdftk.');

    // Once per session: the next turn has it in its prompt without loading it again.
    const second = await storedTurn(t, session, 'recall');
    expect(ofType(second.events, 'skill.loaded')).toEqual([]);
    expect(second.text).toContain('WORKSPACE STYLE');
  });

  it('skill: loads on demand (parent llm.call_completed); skills? searches (skill.search), then auto_suggested', async () => {
    const { t, global, workspace } = await serverWithSkills();
    writeSkill(
      global,
      'pdf-forms',
      'name: pdf-forms\ndescription: Fill in PDF forms with pdftk',
      'Use pdftk fill_form.',
    );
    writeSkill(
      workspace,
      'release',
      'name: release\ndescription: Cut a release of this repo',
      'Tag, then push.',
    );
    writeSkill(
      global,
      'csv-report',
      'name: csv-report\ndescription: Summarize a CSV file',
      'Read it with csvkit.',
    );
    const session = await t.createSession();

    const load = await storedTurn(t, session, 'skill: release');
    const [loaded] = ofType(load.events, 'skill.loaded');
    followsCatalog(loaded, load.events, 'llm.call_completed');
    const [called] = ofType(load.events, 'tool.called');
    expect(loaded.payload).toMatchObject({
      skill_id: 'release',
      load_reason: 'on_demand',
      source: 'workspace',
      triggered_by_tool_use_id: called.payload.tool_use_id,
    });
    expect(load.text).toContain('Tag, then push.');

    const search = await storedTurn(t, session, 'skills? fill a PDF form');
    const [searched] = ofType(search.events, 'skill.search');
    followsCatalog(searched, search.events, 'llm.call_completed');
    expect(searched.actor).toBe('agent');
    expect(searched.payload).toEqual({
      query: 'fill a PDF form',
      results_count: 1,
      result_skill_ids: ['pdf-forms'],
    });
    expect(search.text).toContain('pdf-forms: Fill in PDF forms with pdftk');

    const suggested = await storedTurn(t, session, 'skill: pdf-forms');
    const [auto] = ofType(suggested.events, 'skill.loaded');
    followsCatalog(auto, suggested.events, 'llm.call_completed');
    expect(auto.payload).toMatchObject({
      skill_id: 'pdf-forms',
      load_reason: 'auto_suggested',
      source: 'global',
    });

    // Loading it again gives it again, with no second load against the budget.
    const again = await storedTurn(t, session, 'skill: pdf-forms');
    expect(ofType(again.events, 'skill.loaded')).toEqual([]);
    expect(ofType(again.events, 'tool.completed')).toHaveLength(1);
  });

  it('a load over the budget fails as tool.failed and loads nothing', async () => {
    const { t, workspace } = await serverWithSkills(50);
    writeSkill(workspace, 'small', 'name: small\ndescription: a small skill', 'x'.repeat(120));
    const bigPath = writeSkill(workspace, 'big', 'name: big\ndescription: a big skill', 'y'.repeat(120));
    const session = await t.createSession();
    const ok = await storedTurn(t, session, 'skill: small');
    expect(ofType(ok.events, 'skill.loaded')[0].payload.load_size_tokens).toBe(30);

    const over = await storedTurn(t, session, 'skill: big');
    expect(ofType(over.events, 'skill.loaded')).toEqual([]);
    const [failed] = ofType(over.events, 'tool.failed');
    expect(failed.payload.error_class).toBe('execution_error');
    expect(failed.payload.error_message).toContain(bigPath);
    expect(failed.payload.error_message).toContain('used 30 of its 50-token skill budget');
  });

  it('a malformed SKILL.md or a missing skill is a tool.failed naming the file', async () => {
    const { t, global, workspace } = await serverWithSkills();
    const bad = writeSkill(workspace, 'broken', 'name: broken\nsummary: no description', 'body');
    writeSkill(global, 'fine', 'name: fine\ndescription: a fine skill', 'fine body');
    const session = await t.createSession();

    const malformed = await storedTurn(t, session, 'skill: broken');
    const [failed] = ofType(malformed.events, 'tool.failed');
    expect(failed.payload.error_class).toBe('validation_error');
    expect(failed.payload.error_message).toBe(
      `skill file ${bad}: line 3: unknown key "summary" (known: name, description, load, version)`,
    );

    const missing = await storedTurn(t, session, 'skill: nothing-here');
    const [notFound] = ofType(missing.events, 'tool.failed');
    expect(notFound.payload.error_class).toBe('not_found');
    expect(notFound.payload.error_message).toContain(join(workspace, 'nothing-here', 'SKILL.md'));
    expect(notFound.payload.error_message).toContain(join(global, 'nothing-here', 'SKILL.md'));

    // The prompt names the broken file and still offers the good skill.
    const recall = await storedTurn(t, session, 'recall');
    expect(recall.text).toContain(`Not loaded: skill file ${bad}`);
    expect(recall.text).toContain('- fine: a fine skill');
  });
});
