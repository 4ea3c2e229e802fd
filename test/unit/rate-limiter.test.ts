// The gateway's per-token rate limiter (gateway/rate-limiter.ts).
import t from 'tap';
import { RateLimiter } from '../../gateway/rate-limiter.js';

t.test('rate limiter: burst, then the rate', async (t) => {
  const rl = new RateLimiter(10, 3);
  t.same([rl.take('k', 0), rl.take('k', 0), rl.take('k', 0), rl.take('k', 0)], [true, true, true, false]);
  t.equal(rl.take('k', 100), true, 'one token after 100 ms at 10/s');
  t.equal(rl.take('k', 100), false);
  t.equal(rl.take('other', 100), true, 'keys are independent');
});
