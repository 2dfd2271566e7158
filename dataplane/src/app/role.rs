//! What each connection is to the engine: one [`Role`] per connection,
//! kept in one [`Roles`] table reached by the connection's handle (as
//! smoltcp's `SocketSet` keeps sockets), apart from the TCP engine, so a
//! role's code borrows its own state and the TCP engine side by side and
//! nothing is taken out and put back (docs/architecture.md, "Roles").

use super::deadlines::Wait;
use super::health::Probe;
use super::proxy::ProxyLink;
use super::responder::Session;
use super::tls::TlsConn;
use crate::tcp::ConnId;

/// A connection's role.
#[derive(Debug)]
pub enum Role {
    /// A plain VIP's connection, answered by the built-in responder.
    Responder(Session),
    /// A TLS VIP's connection: the session and what runs on its plaintext.
    Tls(Box<TlsRole>),
    /// A plain proxied VIP's connection, paired with a backend connection.
    Client(Box<ProxyLink>),
    /// A connection to a pool member, paired with its client.
    Backend(Box<ProxyLink>),
    /// A health check's connection to a pool member.
    Probe(Probe),
}

/// A TLS connection: the session and its inner role.
#[derive(Debug)]
pub struct TlsRole {
    pub conn: TlsConn,
    pub inner: Inner,
}

/// What runs on a TLS connection's plaintext.
#[derive(Debug)]
pub enum Inner {
    Responder(Session),
    /// Forwarded to a backend (a TLS VIP with a pool).
    Proxy(ProxyLink),
}

impl Role {
    /// The proxy link of a client (plain or TLS) or backend connection.
    pub fn link(&self) -> Option<&ProxyLink> {
        match self {
            Role::Client(l) | Role::Backend(l) => Some(l),
            Role::Tls(t) => match &t.inner {
                Inner::Proxy(l) => Some(l),
                Inner::Responder(_) => None,
            },
            Role::Responder(_) | Role::Probe(_) => None,
        }
    }

    pub fn link_mut(&mut self) -> Option<&mut ProxyLink> {
        match self {
            Role::Client(l) | Role::Backend(l) => Some(l),
            Role::Tls(t) => match &mut t.inner {
                Inner::Proxy(l) => Some(l),
                Inner::Responder(_) => None,
            },
            Role::Responder(_) | Role::Probe(_) => None,
        }
    }

    pub fn tls(&self) -> Option<&TlsConn> {
        match self {
            Role::Tls(t) => Some(&t.conn),
            _ => None,
        }
    }
}

/// One connection's entry.
#[derive(Debug)]
pub struct Entry<R = Role> {
    pub id: ConnId,
    /// The counter slot of the VIP the connection came in on (`None`
    /// for connections of our own: backends, health checks). It counts
    /// as open there until its `Closed` event.
    pub vip: Option<u16>,
    /// What the connection waits for of its client (its deadline's kind).
    pub wait: Wait,
    pub role: R,
}

/// Every connection's role, by slot. An entry is removed when its
/// connection's `Closed` event is handled; the TCP engine does not reuse
/// a slot before then (`TcpEngine::drain_events`), and each entry keeps
/// its handle, so a stale handle finds nothing.
///
/// Generic over the role type: dpd's [`Role`], or another application's
/// (the load generator's client connections).
#[derive(Debug)]
pub struct Roles<R = Role> {
    slots: Vec<Option<Entry<R>>>,
    len: usize,
}

impl<R> Default for Roles<R> {
    fn default() -> Self {
        Self {
            slots: Vec::new(),
            len: 0,
        }
    }
}

impl<R> Roles<R> {
    /// Gives connection `id` its role (replacing any it had).
    pub fn insert(&mut self, id: ConnId, vip: Option<u16>, role: R) {
        let slot = id.slot();
        if slot >= self.slots.len() {
            self.slots.resize_with(slot + 1, || None);
        }
        if self.slots[slot].is_none() {
            self.len += 1;
        }
        self.slots[slot] = Some(Entry {
            id,
            vip,
            wait: Wait::Nothing,
            role,
        });
    }

    pub fn get(&self, id: ConnId) -> Option<&Entry<R>> {
        self.slots.get(id.slot())?.as_ref().filter(|e| e.id == id)
    }

    pub fn get_mut(&mut self, id: ConnId) -> Option<&mut Entry<R>> {
        self.slots
            .get_mut(id.slot())?
            .as_mut()
            .filter(|e| e.id == id)
    }

    /// Two different connections' entries at once (a proxied pair).
    pub fn pair_mut(&mut self, a: ConnId, b: ConnId) -> Option<(&mut Entry<R>, &mut Entry<R>)> {
        let (i, j) = (a.slot(), b.slot());
        if i == j || i >= self.slots.len() || j >= self.slots.len() {
            return None;
        }
        let (x, y) = if i < j {
            let (lo, hi) = self.slots.split_at_mut(j);
            (&mut lo[i], &mut hi[0])
        } else {
            let (lo, hi) = self.slots.split_at_mut(i);
            (&mut hi[0], &mut lo[j])
        };
        let x = x.as_mut().filter(|e| e.id == a)?;
        let y = y.as_mut().filter(|e| e.id == b)?;
        Some((x, y))
    }

    /// Takes connection `id`'s entry out (its `Closed` event).
    pub fn remove(&mut self, id: ConnId) -> Option<Entry<R>> {
        let slot = self.slots.get_mut(id.slot())?;
        if slot.as_ref().is_some_and(|e| e.id == id) {
            self.len -= 1;
            slot.take()
        } else {
            None
        }
    }

    /// Connections with a role.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn iter(&self) -> impl Iterator<Item = &Entry<R>> {
        self.slots.iter().flatten()
    }

    /// Bytes of the slots made (a reservation beyond them is untouched).
    pub fn state_bytes(&self) -> usize {
        self.slots.len() * std::mem::size_of::<Option<Entry<R>>>()
    }

    /// Reserves room for `slots` slots (address space: pages are touched
    /// as slots are first used), so that inserting never moves the table
    /// inside the engine loop (`tcp::slots_for`). If the reservation is
    /// refused, the table grows as it must.
    pub fn reserve(&mut self, slots: usize) {
        let _ = self
            .slots
            .try_reserve_exact(slots.saturating_sub(self.slots.len()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reserved_table_never_moves() {
        let mut roles = Roles::default();
        roles.reserve(5000);
        let table = roles.slots.as_ptr();
        // Slots in any order up to the reservation, as connections come.
        for slot in (0..5000).rev().step_by(7).chain(0..5000) {
            roles.insert(
                ConnId::new(slot, 0),
                None,
                Role::Responder(Session::default()),
            );
        }
        assert_eq!(roles.len(), 5000);
        assert_eq!(roles.slots.as_ptr(), table, "the table moved");
        assert_eq!(
            roles.state_bytes(),
            5000 * std::mem::size_of::<Option<Entry>>()
        );
    }

    #[test]
    fn a_stale_handle_finds_nothing() {
        let mut roles = Roles::default();
        let old = ConnId::new(3, 0);
        let new = ConnId::new(3, 1);
        roles.insert(old, Some(1), Role::Responder(Session::default()));
        assert!(roles.get(new).is_none());
        assert!(roles.remove(new).is_none());
        assert_eq!(roles.len(), 1);
        assert_eq!(roles.remove(old).map(|e| e.vip), Some(Some(1)));
        assert!(roles.is_empty());
        roles.insert(new, None, Role::Probe(Probe { pool: 0, member: 0 }));
        let b = ConnId::new(7, 0);
        roles.insert(b, None, Role::Responder(Session::default()));
        assert!(roles.pair_mut(new, b).is_some());
        assert!(roles.pair_mut(new, new).is_none());
        assert!(roles.pair_mut(old, b).is_none());
    }
}
