export { type ClientItem, type ClientOptions, type FilterSpec, MetisClient } from './client.js';
export * from './reducer.js';
export * from './state-projection.js';
