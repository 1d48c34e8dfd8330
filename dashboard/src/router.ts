import { useEffect, useState } from 'preact/hooks';

/**
 * The page's place, in the URL's fragment (`#/sessions/sess_1/trace`): the server serves only `/`, so
 * every view is a fragment and a reload lands where the user was.
 */
export type Place =
  /** `query`: the list's search and filters (`q=…&status=ended`), so a reload or a link keeps them. */
  | { view: 'sessions'; query?: string }
  | { view: 'session'; sessionId: string; focus: string | null }
  | { view: 'trace'; sessionId: string; eventId: string | null }
  | { view: 'store' };

export function parsePlace(hash: string): Place {
  const [path = '', query = ''] = hash.replace(/^#/, '').split('?');
  const params = new URLSearchParams(query);
  let parts: string[];
  try {
    parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  } catch {
    // A fragment that is not valid percent-encoding: the sessions, not a blank page.
    return { view: 'sessions' };
  }
  if (parts[0] === 'store') return { view: 'store' };
  if (parts[0] === 'sessions' && parts[1] !== undefined) {
    if (parts[2] === 'trace') return { view: 'trace', sessionId: parts[1], eventId: params.get('event') };
    return { view: 'session', sessionId: parts[1], focus: params.get('focus') };
  }
  return { view: 'sessions', query: params.toString() };
}

export function hrefOf(place: Place): string {
  switch (place.view) {
    case 'sessions':
      return place.query ? `#/?${place.query}` : '#/';
    case 'store':
      return '#/store';
    case 'session':
      return `#/sessions/${encodeURIComponent(place.sessionId)}${place.focus ? `?focus=${encodeURIComponent(place.focus)}` : ''}`;
    case 'trace':
      return `#/sessions/${encodeURIComponent(place.sessionId)}/trace${place.eventId ? `?event=${encodeURIComponent(place.eventId)}` : ''}`;
  }
}

export function usePlace(): Place {
  const [place, setPlace] = useState(() => parsePlace(location.hash));
  useEffect(() => {
    const onChange = () => setPlace(parsePlace(location.hash));
    addEventListener('hashchange', onChange);
    return () => removeEventListener('hashchange', onChange);
  }, []);
  return place;
}

export function go(place: Place): void {
  location.hash = hrefOf(place);
}
