import { useEffect } from 'preact/hooks';

/** Sets the document title while the page is shown. */
export function useTitle(title: string): void {
  useEffect(() => {
    document.title = `${title} · Fleet`;
  }, [title]);
}
