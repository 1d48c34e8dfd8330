import { apiRequest } from './api-request.js';
import { serverTarget } from './server-target.js';

export interface DashboardOptions {
  url?: string;
  token?: string;
  config?: string;
  json?: boolean;
}

/**
 * `metis dashboard`: a fresh sign-in link to the running server's dashboard. The link carries a
 * single-use code (valid 15 minutes), not the token, so it may be pasted into a browser on this machine
 * without the token ending up in a history or a log.
 */
export async function dashboardCommand(options: DashboardOptions): Promise<void> {
  const body = await apiRequest(await serverTarget(options), 'POST', '/dashboard/sign-in-link');
  if (options.json) console.log(JSON.stringify(body));
  else
    console.log(
      `${body.url}\n(works once, within ${Math.round(body.expires_in_seconds / 60)} minutes; the browser then keeps a cookie)`,
    );
}
