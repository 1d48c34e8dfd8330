import type { ContentBlock } from '../../runtime/model-adapter.js';
import { invalid } from './inbound-request.js';

const DATA_URL = /^data:(image\/[a-z0-9.+-]+);base64,([A-Za-z0-9+/=\s]+)$/i;

/**
 * An image part as OpenAI's APIs give it (`image_url.url`): a `data:` URL becomes an inline image, an
 * http(s) URL is passed on for the provider to fetch. metis does not fetch or look at either.
 */
export function imageFromUrl(param: string, url: string): ContentBlock {
  const data = DATA_URL.exec(url);
  if (data)
    return {
      type: 'image',
      source: { kind: 'base64', media_type: data[1]!, data: data[2]!.replace(/\s/g, '') },
    };
  if (/^https?:\/\//i.test(url)) return { type: 'image', source: { kind: 'url', url } };
  throw invalid(param, 'must be an http(s) URL or a data:image/...;base64 URL');
}

/** An image block as Anthropic's Messages API gives it (`source` of type base64 or url). */
export function imageFromSource(param: string, source: unknown): ContentBlock {
  const s = source as Record<string, unknown> | null;
  if (s?.type === 'base64' && typeof s.media_type === 'string' && typeof s.data === 'string')
    return { type: 'image', source: { kind: 'base64', media_type: s.media_type, data: s.data } };
  if (s?.type === 'url' && typeof s.url === 'string') return imageFromUrl(`${param}.url`, s.url);
  throw invalid(param, 'must be {type: "base64", media_type, data} or {type: "url", url}');
}
