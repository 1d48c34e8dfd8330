/**
 * A structural fingerprint of a turn (docs/decisions.md "Pattern routing"): what can be known of it
 * before any model answers, without keeping its words. Two turns with the same fingerprint are
 * "similar" for pattern routing.
 */
export interface FingerprintFeatures {
  /** Length of the user's message: xs < 40 characters ≤ s < 200 ≤ m < 1,000 ≤ l < 4,000 ≤ xl. */
  readonly length_band: 'xs' | 's' | 'm' | 'l' | 'xl';
  /** The message holds code (a fence, an indented block, statement endings, common keywords). */
  readonly has_code: boolean;
  /** The writing system most of its letters are in. */
  readonly script: 'latin' | 'cjk' | 'cyrillic' | 'arabic' | 'other' | 'none';
  /** It ends with a question mark. */
  readonly question: boolean;
  /** The conversation had used tools before this turn. */
  readonly tools_in_history: boolean;
  /** The workspace, as the first 12 hex digits of its path's hash. */
  readonly workspace: string;
}

export interface Fingerprint {
  readonly key: string;
  readonly features: FingerprintFeatures;
}

const CODE =
  /```|^(?: {4}|\t)\S|[{};]\s*$|\b(?:function|def|class|import|const|let|return|SELECT|#include)\b/m;

const SCRIPTS: readonly [FingerprintFeatures['script'], RegExp][] = [
  ['latin', /\p{Script=Latin}/gu],
  ['cjk', /[\p{Script=Han}\p{Script=Hiragana}\p{Script=Katakana}\p{Script=Hangul}]/gu],
  ['cyrillic', /\p{Script=Cyrillic}/gu],
  ['arabic', /\p{Script=Arabic}/gu],
];

export function fingerprintOf(message: string, toolsInHistory: boolean, workspaceHash: string): Fingerprint {
  const features: FingerprintFeatures = {
    length_band: lengthBand(message.length),
    has_code: CODE.test(message),
    script: scriptOf(message),
    question: /\?\s*$/.test(message),
    tools_in_history: toolsInHistory,
    workspace: workspaceHash.slice(0, 12),
  };
  const key = [
    'v1',
    `ws=${features.workspace}`,
    `len=${features.length_band}`,
    `code=${Number(features.has_code)}`,
    `script=${features.script}`,
    `q=${Number(features.question)}`,
    `tools=${Number(features.tools_in_history)}`,
  ].join('|');
  return { key, features };
}

function lengthBand(length: number): FingerprintFeatures['length_band'] {
  if (length < 40) return 'xs';
  if (length < 200) return 's';
  if (length < 1000) return 'm';
  if (length < 4000) return 'l';
  return 'xl';
}

function scriptOf(message: string): FingerprintFeatures['script'] {
  const letters = message.match(/\p{L}/gu)?.length ?? 0;
  if (letters === 0) return 'none';
  let best: FingerprintFeatures['script'] = 'other';
  let bestCount = 0;
  for (const [script, pattern] of SCRIPTS) {
    const count = message.match(pattern)?.length ?? 0;
    if (count > bestCount) {
      best = script;
      bestCount = count;
    }
  }
  return bestCount * 2 >= letters ? best : 'other';
}
