export * from "./native.js";
export * from "./bridge.js";
export * from "./codes.js";
