// Which change of a traffic light is which kind of e-mail notification (lib/contract/schemas/notifications.ts
// MAIL_KINDS): turned red, turned late, turned yellow, recovered (red, late or yellow to green),
// went into maintenance. A new instance's first colour (from grey) is none of them, nor is the end
// of a window (what follows it is: red or late).
import type { MailKind } from '../contract/schemas/notifications.js';
import type { LightEvent } from './traffic-light.js';

export function mailKind(e: Pick<LightEvent, 'from' | 'to'>): MailKind | null {
  if (e.to === 'red') return 'red';
  if (e.to === 'late') return 'late';
  if (e.to === 'maintenance') return 'maintenance';
  if (e.to === 'yellow') return e.from === 'grey' ? null : 'yellow';
  if (e.to === 'green' && (e.from === 'red' || e.from === 'late' || e.from === 'yellow')) return 'green';
  return null;
}
