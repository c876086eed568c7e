// The slices of the chrome.* API the extension uses, as plain interfaces: the
// real `chrome` object satisfies them, and the tests pass a fake. `ChromeApi`
// is the worker's; `PageRuntime` is what the content script and the
// extension's own pages use to reach the worker.

export type ChromeEvent<F extends (...args: never[]) => void> = {
  addListener(listener: F): void;
  removeListener(listener: F): void;
};

export type MessageSender = {
  id?: string;
  origin?: string;
  url?: string;
  /** `url` and `title` only where the extension has host permission for the tab's page. */
  tab?: { id?: number; url?: string; title?: string };
  frameId?: number;
};

export type Port = {
  name: string;
  sender?: MessageSender;
  postMessage(message: unknown): void;
  disconnect(): void;
  onMessage: ChromeEvent<(message: unknown, port: Port) => void>;
  onDisconnect: ChromeEvent<(port: Port) => void>;
};

export type ChromeApi = {
  runtime: {
    id: string;
    lastError?: { message?: string } | undefined;
    onConnect: ChromeEvent<(port: Port) => void>;
    onConnectExternal?: ChromeEvent<(port: Port) => void>;
    connectNative(application: string): Port;
    getURL(path: string): string;
    /** A profile starting (the browser's start-up). */
    onStartup?: ChromeEvent<() => void>;
  };
  storage: {
    /** Lives for the browser session; the worker's trusted contexts only (never content scripts). */
    session: {
      get(key: string): Promise<Record<string, unknown>>;
      set(items: Record<string, unknown>): Promise<void>;
    };
  };
  action?: {
    openPopup?(): Promise<void>;
    setBadgeText?(details: { text: string; tabId?: number }): Promise<void>;
    setBadgeBackgroundColor?(details: { color: string; tabId?: number }): Promise<void>;
    setTitle?(details: { title: string; tabId?: number }): Promise<void>;
  };
  windows: {
    create(data: { url: string; type: "popup"; width?: number; height?: number; focused?: boolean }): Promise<{ id?: number } | undefined>;
    remove(windowId: number): Promise<void>;
    onRemoved?: ChromeEvent<(windowId: number) => void>;
  };
};

/** chrome.runtime as the content script and the extension's pages use it: a port to the worker. */
export type PageRuntime = {
  connect(info: { name: string }): Port;
  lastError?: { message?: string } | undefined;
  getURL?(path: string): string;
};
