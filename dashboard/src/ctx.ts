// What every view needs: the logged-in user and their role in the active customer, the language.
import { createContext } from 'preact';
import { useContext } from 'preact/hooks';
import type { Lang, Translate } from './i18n.js';
import type { Me, Role } from './types.js';

export interface AppState {
  me: Me | null;
  role: Role | null;
  lang: Lang;
  setLang: (l: Lang) => void;
  t: Translate;
  refreshMe: () => Promise<void>;
  /** Admin or owner in the active customer (tokens, whitelist, webhooks, commands). */
  canAdmin: boolean;
}

export const AppCtx = createContext<AppState>(null as unknown as AppState);
export const useApp = () => useContext(AppCtx);

export const ROLE_RANK: Record<Role, number> = { viewer: 1, admin: 2, owner: 3 };
