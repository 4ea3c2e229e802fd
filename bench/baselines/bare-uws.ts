// The ceiling: a bare uWebSockets.js server that reads each POST body and answers {"ok":true},
// doing nothing else. Same library and build as the gateway, same requests.
import { loadUws } from '../../gateway/http/uws.js';

const { uws, native } = loadUws(false);
const port = Number(process.env.PORT ?? 0);
const app = uws.App();
app.post('/*', (res) => {
  let aborted = false;
  res.onAborted(() => (aborted = true));
  res.onData((_chunk, isLast) => {
    if (isLast && !aborted) res.cork(() => res.writeHeader('Content-Type', 'application/json').end('{"ok":true}'));
  });
});
app.listen('127.0.0.1', port, (s) => {
  if (!s) throw new Error('listen failed');
  process.stdout.write(JSON.stringify({ msg: 'listening', port: uws.us_socket_local_port(s as never), native }) + '\n');
});
