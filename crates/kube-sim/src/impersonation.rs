//! User impersonation (`Impersonate-User`, `Impersonate-Group`, `Impersonate-Uid`), as the
//! real API server's impersonation filter does it: after authentication, every impersonated
//! attribute must be allowed to the authenticated user by the verb `impersonate` (service
//! accounts on `serviceaccounts` in their namespace, other users on `users`, groups on `groups`,
//! UIDs on `uids`, all in the core group), then the request runs as the impersonated user.
//! A service account impersonated without groups gets `system:serviceaccounts` and
//! `system:serviceaccounts:<namespace>`; every impersonated user but `system:anonymous` gets
//! `system:authenticated`.

use http::HeaderMap;

use crate::error::ApiError;
use crate::request::{Authorizer, RequestInfo, UserInfo};

const USER: &str = "impersonate-user";
const GROUP: &str = "impersonate-group";
const UID: &str = "impersonate-uid";
const EXTRA_PREFIX: &str = "impersonate-extra-";
const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";

/// The user the request runs as: `authenticated`, or whom its headers impersonate when the
/// authorizer lets `authenticated` impersonate every attribute asked for.
pub(crate) fn apply(
    headers: &HeaderMap,
    authenticated: UserInfo,
    authorizer: Option<&dyn Authorizer>,
    store: &crate::store::Store,
) -> Result<UserInfo, ApiError> {
    let values = |name: &str| -> Vec<String> {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::to_string)
            .collect()
    };
    let users = values(USER);
    let groups = values(GROUP);
    let uids = values(UID);
    let has_extra = headers.keys().any(|k| k.as_str().starts_with(EXTRA_PREFIX));
    let Some(name) = users.first().cloned() else {
        if !groups.is_empty() || !uids.is_empty() || has_extra {
            return Err(ApiError::bad_request(
                "requested impersonation of groups, a uid or extra fields without impersonating a user",
            ));
        }
        return Ok(authenticated);
    };
    if users.len() > 1 {
        return Err(ApiError::bad_request("only one user may be impersonated"));
    }
    let mut checks: Vec<(&str, Option<String>, String)> = Vec::new();
    let service_account = name
        .strip_prefix(SERVICE_ACCOUNT_PREFIX)
        .and_then(|rest| rest.split_once(':'));
    match service_account {
        Some((ns, sa)) => checks.push(("serviceaccounts", Some(ns.to_string()), sa.to_string())),
        None => checks.push(("users", None, name.clone())),
    }
    for group in &groups {
        checks.push(("groups", None, group.clone()));
    }
    for uid in &uids {
        checks.push(("uids", None, uid.clone()));
    }
    if let Some(az) = authorizer {
        for (resource, namespace, object) in checks {
            let info = RequestInfo {
                verb: "impersonate".to_string(),
                api_group: String::new(),
                api_version: "v1".to_string(),
                resource: resource.to_string(),
                subresource: None,
                namespace,
                name: Some(object.clone()),
                kind: String::new(),
                path: String::new(),
                is_resource_request: true,
            };
            if let Err(reason) = az.authorize(&authenticated, &info, store) {
                return Err(ApiError::forbidden("", resource, &object, reason));
            }
        }
    }
    let mut impersonated = groups.clone();
    if groups.is_empty()
        && let Some((ns, _)) = service_account
    {
        impersonated.push("system:serviceaccounts".to_string());
        impersonated.push(format!("system:serviceaccounts:{ns}"));
    }
    if name != crate::auth::ANONYMOUS_USER
        && !impersonated
            .iter()
            .any(|g| g == crate::auth::AUTHENTICATED_GROUP)
    {
        impersonated.push(crate::auth::AUTHENTICATED_GROUP.to_string());
    }
    Ok(UserInfo {
        name,
        groups: impersonated,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct OnlyUsers(&'static str);

    impl Authorizer for OnlyUsers {
        fn authorize(
            &self,
            user: &UserInfo,
            req: &RequestInfo,
            _: &crate::store::Store,
        ) -> Result<(), String> {
            if user.name == self.0 && req.verb == "impersonate" && req.resource == "serviceaccounts"
            {
                Ok(())
            } else {
                Err(format!(
                    "{} may not {} {}",
                    user.name, req.verb, req.resource
                ))
            }
        }
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, v.parse().unwrap_or_else(|e| panic!("{e}")));
        }
        h
    }

    fn operator() -> UserInfo {
        UserInfo {
            name: "operator".into(),
            groups: vec!["system:authenticated".into()],
        }
    }

    #[test]
    fn a_service_account_is_impersonated_with_its_groups_when_allowed() {
        let store = crate::store::Store::new(16);
        let az = OnlyUsers("operator");
        let as_sa = apply(
            &headers(&[(USER, "system:serviceaccount:tenant:reader")]),
            operator(),
            Some(&az),
            &store,
        )
        .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(as_sa.name, "system:serviceaccount:tenant:reader");
        assert_eq!(
            as_sa.groups,
            [
                "system:serviceaccounts",
                "system:serviceaccounts:tenant",
                "system:authenticated"
            ]
        );
        let user = apply(&headers(&[(USER, "alice")]), operator(), Some(&az), &store);
        assert!(matches!(user, Err(e) if e.code == 403));
        let group = apply(
            &headers(&[
                (USER, "system:serviceaccount:tenant:reader"),
                (GROUP, "system:masters"),
            ]),
            operator(),
            Some(&az),
            &store,
        );
        assert!(matches!(group, Err(e) if e.code == 403));
        let lone_group = apply(&headers(&[(GROUP, "g")]), operator(), Some(&az), &store);
        assert!(matches!(lone_group, Err(e) if e.code == 400));
        assert_eq!(
            apply(&HeaderMap::new(), operator(), Some(&az), &store).map(|u| u.name),
            Ok("operator".to_string())
        );
    }
}
