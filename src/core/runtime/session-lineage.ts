// The delegation tree is read from the store, which needs it itself (a shipment is fenced by a
// session's root); this path remains for the server and cluster modules that still import it here.
export {
  isSelfOrAncestor,
  MAX_DELEGATION_DEPTH,
  rootSession,
  selfAndDescendants,
} from '../store/session-lineage.js';
