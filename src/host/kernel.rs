//! Kernel constants for the host network model (IFA_F_*, RT_SCOPE_*, RTPROT_*, RTN_*, tables),
//! shared by the netlink adapter, the fake and the interface manager, so that nobody writes
//! magic numbers.

/// `IFA_F_SECONDARY`: an IPv4 address in the same subnet as a primary one.
pub const IFA_F_SECONDARY: u32 = 0x01;
/// `IFA_F_NODAD`: no duplicate address detection (IPv6).
pub const IFA_F_NODAD: u32 = 0x02;
pub const IFA_F_OPTIMISTIC: u32 = 0x04;
pub const IFA_F_DADFAILED: u32 = 0x08;
pub const IFA_F_HOMEADDRESS: u32 = 0x10;
pub const IFA_F_DEPRECATED: u32 = 0x20;
pub const IFA_F_TENTATIVE: u32 = 0x40;
/// Set by the kernel on addresses with an infinite valid lifetime.
pub const IFA_F_PERMANENT: u32 = 0x80;
pub const IFA_F_MANAGETEMPADDR: u32 = 0x100;
/// `noprefixroute`: the kernel adds no prefix route for this address.
pub const IFA_F_NOPREFIXROUTE: u32 = 0x200;
pub const IFA_F_MCAUTOJOIN: u32 = 0x400;
pub const IFA_F_STABLE_PRIVACY: u32 = 0x800;

/// The flags a user may set when adding an address (what `inet6_rtm_newaddr` accepts; the
/// others are state the kernel computes: secondary, tentative, deprecated, permanent…).
pub const IFA_SETTABLE_FLAGS: u32 = IFA_F_NODAD
    | IFA_F_OPTIMISTIC
    | IFA_F_HOMEADDRESS
    | IFA_F_MANAGETEMPADDR
    | IFA_F_NOPREFIXROUTE
    | IFA_F_MCAUTOJOIN;

/// Lifetime value meaning "forever".
pub const LIFETIME_FOREVER: u32 = u32::MAX;

pub const RT_SCOPE_UNIVERSE: u8 = 0;
pub const RT_SCOPE_SITE: u8 = 200;
pub const RT_SCOPE_LINK: u8 = 253;
pub const RT_SCOPE_HOST: u8 = 254;
pub const RT_SCOPE_NOWHERE: u8 = 255;

pub const RTPROT_UNSPEC: u8 = 0;
pub const RTPROT_REDIRECT: u8 = 1;
pub const RTPROT_KERNEL: u8 = 2;
pub const RTPROT_BOOT: u8 = 3;
pub const RTPROT_STATIC: u8 = 4;
pub const RTPROT_RA: u8 = 9;
pub const RTPROT_DHCP: u8 = 16;

pub const RTN_UNICAST: u8 = 1;
pub const RTN_LOCAL: u8 = 2;
pub const RTN_BROADCAST: u8 = 3;
pub const RTN_ANYCAST: u8 = 4;
pub const RTN_MULTICAST: u8 = 5;

pub const RT_TABLE_MAIN: u32 = 254;
pub const RT_TABLE_LOCAL: u32 = 255;

/// Linux `IFNAMSIZ - 1`: the longest interface name.
pub const MAX_IFNAME_LEN: usize = 15;

/// IPv6 routes get this metric when none is given.
pub const IP6_RT_PRIO_USER: u32 = 1024;
/// IPv6 kernel prefix routes get this metric.
pub const IP6_RT_PRIO_ADDRCONF: u32 = 256;

/// Why the kernel would refuse an interface name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IfnameError {
    #[error("empty")]
    Empty,
    #[error("{0} bytes, longer than {MAX_IFNAME_LEN}")]
    TooLong(usize),
    #[error("'.' and '..' are reserved")]
    Reserved,
    #[error("contains {0:?}")]
    Contains(char),
}

/// Checks an interface name the way the kernel's `dev_valid_name` does.
pub fn validate_ifname(name: &str) -> Result<(), IfnameError> {
    if name.is_empty() {
        return Err(IfnameError::Empty);
    }
    if name.len() > MAX_IFNAME_LEN {
        return Err(IfnameError::TooLong(name.len()));
    }
    if name == "." || name == ".." {
        return Err(IfnameError::Reserved);
    }
    if let Some(c) = name
        .chars()
        .find(|c| *c == '/' || *c == ':' || c.is_whitespace() || c.is_control())
    {
        return Err(IfnameError::Contains(c));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ifname_validation() {
        assert!(validate_ifname("eth0").is_ok());
        assert!(validate_ifname("eth0~").is_ok());
        assert!(validate_ifname("enp0s31f6abcdef").is_ok()); // 15 bytes
        assert!(validate_ifname("enp0s31f6abcdef~").is_err()); // 16 bytes
        assert!(validate_ifname("").is_err());
        assert!(validate_ifname("a/b").is_err());
        assert!(validate_ifname("a b").is_err());
        assert!(validate_ifname("a:b").is_err());
        assert!(validate_ifname("..").is_err());
    }
}
