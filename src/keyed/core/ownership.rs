//! Which keys a member owns in the newest view, and which it runs: what to
//! start and what to stop. Ownership is weighed once per view, and the
//! running keys it does not own are kept as keys start and stop, so the
//! member's loop, which asks on every pass, weighs nothing.

use super::*;

impl Core {
    /// Works out which keys this member owns in `set`, the view it is
    /// about to adopt, and so which running keys it must stop; `self.newest`
    /// is still the view before.
    pub(super) fn reweigh(&mut self, set: &MemberSet) {
        let owns = |key: &String| set.is_owner(key.as_str(), &self.me.id);
        let is_member = |set: &MemberSet| set.get(&self.me.id).is_some();
        self.owned = match &self.newest {
            // A member reads the object before its join lands, and outside
            // the set it owns nothing.
            _ if !is_member(set) => Vec::new(),
            // Others only joined this member: a key can move only to one of
            // them, so this member's keys now are among those it owned, and
            // the other keys need not be weighed. Most view changes are
            // joins, and a member owns only its share of the keys.
            Some(seen) if is_member(&seen.set) && set.extends(&seen.set) => {
                std::mem::take(&mut self.owned).into_iter().filter(owns).collect()
            }
            _ => self.keys.iter().filter(|key| owns(key)).cloned().collect(),
        };
        self.owned_lookup = self.owned.iter().cloned().collect();
        self.index_running();
    }

    /// Running keys this member must stop now: all of them when its term
    /// does not hold or it is no longer a member, else those it does not own
    /// in the newest view.
    pub fn to_stop(&self, now: Instant) -> Vec<String> {
        if !self.term_holds(now) || self.vanished() {
            return self.running.keys().cloned().collect();
        }
        if self.newest.is_none() {
            return self.running.keys().cloned().collect();
        }
        self.unowned_running.iter().cloned().collect()
    }

    pub fn stopped(&mut self, key: &str) {
        Arc::make_mut(&mut self.running).remove(key);
        self.unowned_running.remove(key);
    }

    /// Works out which running keys are owned in the newest view, after the
    /// view or the running keys changed wholesale.
    pub(super) fn index_running(&mut self) {
        let owned = &self.owned_lookup;
        self.unowned_running = self.running.keys().filter(|k| !owned.contains(k.as_str())).cloned().collect();
    }

    /// Keys to start now, with their round: owned in the newest view, not
    /// running, and only when that view is active.
    pub fn to_start(&self, now: Instant) -> Vec<(String, Round)> {
        let Some(seen) = &self.newest else { return Vec::new() };
        if !self.term_holds(now) || self.vanished() || now < self.hold_new_until || !self.may_start_in(&seen.record) {
            return Vec::new();
        }
        // Every running key not among those to stop is owned: when they
        // are as many as the owned keys, nothing waits to start.
        if self.running.len() - self.unowned_running.len() == self.owned_lookup.len() {
            return Vec::new();
        }
        let round = self.round_for(seen.record.view);
        self.owned.iter().filter(|k| !self.running.contains_key(k.as_str())).map(|k| (k.clone(), round)).collect()
    }

    pub fn started(&mut self, key: String, round: Round) {
        if !self.owned_lookup.contains(&key) {
            self.unowned_running.insert(key.clone());
        }
        Arc::make_mut(&mut self.running).insert(key, round);
    }
}
